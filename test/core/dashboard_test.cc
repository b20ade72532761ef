// The head's dashboard in a real browser: a 2-node cluster with a long task
// running, a failed task, a crashed worker, an actor and demand no node can meet; headless
// Chromium loads http://127.0.0.1:PORT/ until the page's DOM lists both nodes
// and the running task, then saves a screenshot in the build folder
// (dashboard.png). Needs Debian's `chromium` (scripts/install-test-deps);
// without a browser it exits 77, which CTest reports as SKIPPED.
#define CATCH_CONFIG_RUNNER
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/runtime/cluster.h"
#include "lumen/common/head_client.h"
#include "lumen/lumen.h"
#include "test/core/test_support.h"

namespace {

// Runs until the cluster stops (its worker dies with its node daemon); long
// enough for the browser to see it running.
int DashboardSlowStep(int seconds) {
  for (int i = 0; i < seconds * 10; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return seconds;
}

int DashboardExplodes(int) { throw std::runtime_error("disk full: /data/shard-7 has no space left"); }

// Its worker dies of a signal nobody in the cluster sent.
int DashboardCrashes(int) {
  ::raise(SIGKILL);
  return 0;
}

class DashboardCounter {
 public:
  static DashboardCounter* Create() { return new DashboardCounter(); }
  int Add(int x) { return n_ += x; }

 private:
  int n_ = 0;
};

std::string g_browser;  // the Chromium binary, found by main

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Starts `spec` or fails the test case.
lumen::runtime::ClusterProcesses Start(const lumen::runtime::ClusterSpec& spec) {
  auto started = lumen::runtime::StartCluster(spec);
  if (!started.ok()) FAIL("cannot start a cluster: " << started.status().message());
  return std::move(*started);
}

// The browser's command line: headless, its profile in `profile`, the page
// given time to fetch /api/cluster and draw it.
std::string Browser(const std::string& profile, const std::string& what, const std::string& url) {
  return "HOME=" + profile + " TMPDIR=" + profile + " timeout 90 " + g_browser +
         " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run"
         " --hide-scrollbars --user-data-dir=" + profile + "/profile --virtual-time-budget=5000 " +
         what + " '" + url + "' 2>/dev/null";
}

}  // namespace

LUMEN_REMOTE(DashboardSlowStep, DashboardExplodes, DashboardCrashes, DashboardCounter::Create,
             &DashboardCounter::Add);

using lumen::test::RunCommand;
using lumen::test::WaitUntil;

// Invariant: what the cluster does shows on the page a newcomer opens: both
// nodes in the node table, the running task with its name, the failed task's
// message, the worker that died and how, the infeasible demand in words, and
// the GPUs a node samples through NVML (libfake-nvml.so) with their use.
TEST_CASE("dashboard: the page lists both nodes and the running task") {
  ::setenv("LUMEN_HEALTH_CHECK_PERIOD_MS", "100", 1);
  ::setenv("LUMEN_REPORT_PERIOD_MS", "200", 1);
  ::setenv("LUMEN_TASK_EVENT_FLUSH_PERIOD_MS", "100", 1);
  lumen::runtime::ClusterSpec head_spec;
  head_spec.resources = {{"CPU", 2}, {"memory", 2.0 * (1 << 30)}};
  head_spec.object_store_bytes = 256ull << 20;
  head_spec.metrics_port = 0;
  auto head = Start(head_spec);
  lumen::runtime::ClusterSpec second_spec;
  second_spec.start_head = false;
  second_spec.head_address = head.head_address;
  second_spec.resources = {{"CPU", 4}, {"memory", 4.0 * (1 << 30)}};
  second_spec.object_store_bytes = 128ull << 20;
  // The second node samples two (fake) GPUs through NVML: the page's GPU column.
  ::setenv("LUMEN_NVML_LIBRARY", LUMEN_FAKE_NVML_PATH, 1);
  auto second = Start(second_spec);
  ::unsetenv("LUMEN_NVML_LIBRARY");

  std::vector<std::string> node_ids;
  REQUIRE(WaitUntil([&] {
    auto nodes = lumen::runtime::QueryNodes(head.head_address);
    node_ids.clear();
    if (nodes.ok()) {
      for (const auto& n : *nodes)
        if (n.alive) node_ids.push_back(n.id.Hex());
    }
    return node_ids.size() == 2;
  }));
  std::string address;
  std::getline(std::ifstream(head.session_dir + "/metrics_address"), address);
  REQUIRE(address.rfind("127.0.0.1:", 0) == 0);
  std::string url = "http://" + address + "/";

  // The browser's profile and HOME, inside this run's TMPDIR (main's).
  std::string profile = std::string(std::getenv("TMPDIR")) + "/browser-XXXXXX";
  REQUIRE(::mkdtemp(profile.data()) != nullptr);
  {
    lumen::Config config;
    config.address = head.head_address;
    lumen::Init(config);
    // The second node (the one without the driver) runs the long task.
    std::string second_node;
    for (const auto& id : node_ids)
      if (id != lumen::GetNodeId()) second_node = id;
    REQUIRE(!second_node.empty());
    auto slow = lumen::Task(DashboardSlowStep)
                    .SetSchedulingStrategy(lumen::NodeAffinity(second_node))
                    .Remote(120);
    auto counter = lumen::Actor(DashboardCounter::Create).SetName("counter").Remote();
    REQUIRE(*lumen::Get(counter.Task(&DashboardCounter::Add).Remote(2)) == 2);
    CHECK_THROWS_AS(lumen::Get(lumen::Task(DashboardExplodes).Remote(1)), lumen::TaskError);
    CHECK_THROWS_AS(lumen::Get(lumen::Task(DashboardCrashes).SetMaxRetries(0).Remote(1)),
                    lumen::WorkerCrashedError);
    auto gpu = lumen::Task(DashboardSlowStep).SetNumGpus(1).Remote(1);  // no node has a GPU

    std::string dom;
    bool shown = WaitUntil(
        [&] {
          RunCommand(Browser(profile, "--dump-dom", url), &dom);
          return dom.find(node_ids[0].substr(0, 12)) != std::string::npos &&
                 dom.find(node_ids[1].substr(0, 12)) != std::string::npos &&
                 dom.find("DashboardSlowStep") != std::string::npos &&
                 dom.find(">running<") != std::string::npos &&
                 dom.find("disk full: /data/shard-7") != std::string::npos &&
                 dom.find("killed by SIGKILL") != std::string::npos &&
                 dom.find("no node has a GPU") != std::string::npos &&
                 dom.find("GPU 0 · 37 % busy") != std::string::npos &&
                 dom.find("GPU 1 · 91 % busy") != std::string::npos &&
                 dom.find("70.0 GiB / 80.0 GiB memory") != std::string::npos;
        },
        std::chrono::seconds(120));
    INFO(dom);
    CHECK(shown);
    std::string png = std::string(LUMEN_BUILD_DIR) + "/dashboard.png";
    std::filesystem::remove(png);
    std::string output;
    RunCommand(Browser(profile, "--window-size=1400,1500 --screenshot=" + png, url), &output);
    INFO(output);
    std::string image = ReadFile(png);
    CHECK(image.size() > 10000);
    CHECK(image.rfind("\x89PNG", 0) == 0);
    lumen::Shutdown();
  }
  std::error_code ec;
  std::filesystem::remove_all(profile, ec);
  lumen::runtime::StopCluster(second);
  lumen::runtime::StopCluster(head);
}

int main(int argc, char** argv) {
  if (const char* role = std::getenv("LUMEN_ROLE"); role && *role) lumen::Init(argc, argv);
  const char* chosen = std::getenv("LUMEN_CHROMIUM");
  for (const char* candidate : {chosen, "chromium", "chromium-browser", "google-chrome"}) {
    if (candidate == nullptr || !*candidate) continue;
    std::string ignored;
    if (lumen::test::RunCommand(std::string("command -v ") + candidate, &ignored) == 0) {
      g_browser = candidate;
      break;
    }
  }
  if (g_browser.empty()) {
    std::printf(
        "SKIPPED: no headless browser (chromium) here; scripts/install-test-deps installs "
        "Debian's chromium, or set LUMEN_CHROMIUM\n");
    return 77;
  }
  // This run's own TMPDIR, as the other cluster tests do.
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/lumen-t-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) return 1;
  ::setenv("TMPDIR", dir.c_str(), 1);
  int failed = Catch::Session().run(argc, argv);
  std::error_code ec;
  if (!std::filesystem::remove(dir, ec)) std::fprintf(stderr, "left behind: %s\n", dir.c_str());
  return failed == 0 ? 0 : 1;
}
