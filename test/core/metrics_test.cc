// The head's GET /metrics on a real cluster, scraped over HTTP and parsed by
// the strict exposition parser; and the HTTP server's token rule beyond
// loopback.
#include <dlfcn.h>

#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "core/head/http_server.h"
#include "core/runtime/cluster.h"
#include "lumen/lumen.h"
#include "test/core/test_support.h"
#include "test/head/http_get.h"
#include "test/head/prometheus_parser.h"

namespace {

int SquareForMetrics(int x) { return x * x; }

class MetricsCounter {
 public:
  static MetricsCounter* Create() { return new MetricsCounter(); }
  int Add(int x) { return total_ += x; }

 private:
  int total_ = 0;
};


double Sample(const std::vector<lumen::test::PromFamily>& families, const std::string& name,
              const std::map<std::string, std::string>& labels) {
  for (const auto& f : families)
    for (const auto& s : f.samples)
      if (s.name == name && s.labels == labels) return s.value;
  return -1;
}

// Whether `page` has a sample of family `prefix`* labelled node=`node` (any node: "").
bool HasSeries(const std::vector<lumen::test::PromFamily>& families, const std::string& prefix,
               const std::string& node = "") {
  for (const auto& f : families)
    for (const auto& s : f.samples)
      if (s.name.rfind(prefix, 0) == 0 && (node.empty() || (s.labels.contains("node") && s.labels.at("node") == node)))
        return true;
  return false;
}

// Whether this machine has NVIDIA's NVML (a real GPU node reports its GPUs).
bool MachineHasNvml() {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib != nullptr) ::dlclose(lib);
  return lib != nullptr;
}

}  // namespace

LUMEN_REMOTE(SquareForMetrics, MetricsCounter::Create, &MetricsCounter::Add);

using lumen::test::WaitUntil;

// Invariant: /metrics parses under the format's rules and counts what the
// cluster did: the node's resources and every task that finished.
TEST_CASE("the head serves GET /metrics in the Prometheus text format") {
  ::setenv("LUMEN_TASK_EVENT_FLUSH_PERIOD_MS", "100", 1);
  ::setenv("LUMEN_REPORT_PERIOD_MS", "100", 1);
  lumen::runtime::ClusterSpec spec;
  spec.resources = {{"CPU", 2}, {"memory", 1 << 30}};
  spec.object_store_bytes = 128ull << 20;
  spec.metrics_port = 0;
  auto cluster = lumen::runtime::StartCluster(spec);
  REQUIRE(cluster.ok());
  std::ifstream file(cluster->session_dir + "/metrics_address");
  std::string address;
  std::getline(file, address);
  REQUIRE(address.rfind("127.0.0.1:", 0) == 0);
  int port = std::stoi(address.substr(address.find(':') + 1));
  {
    lumen::Config config;
    config.address = cluster->head_address;
    lumen::Init(config);
    constexpr int kTasks = 10;
    for (int i = 0; i < kTasks; ++i) REQUIRE(*lumen::Get(lumen::Task(SquareForMetrics).Remote(i)) == i * i);
    // One actor, alive: its owner lists it, and /metrics counts it by state.
    auto actor = lumen::Actor(MetricsCounter::Create).Remote();
    REQUIRE(*lumen::Get(actor.Task(&MetricsCounter::Add).Remote(2)) == 2);

    std::string page;
    absl::StatusOr<std::vector<lumen::test::PromFamily>> parsed;
    bool counted = WaitUntil([&] {
      auto [status, body] = lumen::test::HttpGet("127.0.0.1", port, "/metrics");
      if (status != 200) return false;
      page = body;
      parsed = lumen::test::ParsePrometheusText(page);
      return parsed.ok() && Sample(*parsed, "lumen_tasks", {{"state", "FINISHED"}}) >= kTasks &&
             Sample(*parsed, "lumen_actors", {{"state", "ALIVE"}}) == 1;
    });
    INFO(page);
    REQUIRE(parsed.ok());
    CHECK(counted);
    std::string node;
    for (const auto& f : *parsed)
      for (const auto& s : f.samples)
        if (s.name == "lumen_node_info") node = s.labels.at("node");
    REQUIRE(!node.empty());
    CHECK(Sample(*parsed, "lumen_node_resource_total", {{"node", node}, {"resource", "CPU"}}) == 2);
    CHECK(Sample(*parsed, "lumen_object_store_capacity_bytes", {{"node", node}}) > 0);
    CHECK(Sample(*parsed, "lumen_object_store_pinned_bytes", {{"node", node}}) >= 0);
    CHECK(Sample(*parsed, "lumen_actors", {{"state", "DEAD"}}) == 0);
    CHECK(Sample(*parsed, "lumen_task_latency_seconds_count", {}) >= kTasks);
    CHECK(lumen::test::HttpGet("127.0.0.1", port, "/nothing-here").first == 404);
    // A node without NVML: no GPU family at all.
    if (!MachineHasNvml()) CHECK_FALSE(HasSeries(*parsed, "lumen_node_gpu"));
    lumen::Shutdown();
  }
  lumen::runtime::StopCluster(*cluster);
  ::unsetenv("LUMEN_TASK_EVENT_FLUSH_PERIOD_MS");
  ::unsetenv("LUMEN_REPORT_PERIOD_MS");
}

// Invariant: beyond loopback the HTTP server answers only requests that carry
// the cluster token, and does not start without one.
TEST_CASE("the head's HTTP server needs the token beyond loopback") {
  boost::asio::io_context io;
  lumen::head::HttpServer without(io, {.host = "0.0.0.0", .port = 0, .token = ""});
  CHECK(without.Start().code() == absl::StatusCode::kFailedPrecondition);

  lumen::head::HttpServer server(io, {.host = "0.0.0.0", .port = 0, .token = "sesame"});
  server.Route("/metrics", [](const lumen::head::HttpRequest&) {
    return lumen::head::HttpResponse{200, "text/plain", "ok\n"};
  });
  REQUIRE(server.Start().ok());
  std::thread loop([&] { io.run(); });
  auto bare = lumen::test::HttpGet("127.0.0.1", server.port(), "/metrics");
  auto wrong = lumen::test::HttpGet("127.0.0.1", server.port(), "/metrics", "Bearer nope");
  auto right = lumen::test::HttpGet("127.0.0.1", server.port(), "/metrics", "Bearer sesame");
  io.stop();
  loop.join();
  CHECK(bare.first == 401);
  CHECK(wrong.first == 401);
  CHECK(right.first == 200);
  CHECK(right.second == "ok\n");
}

// Invariant: a node whose NVML (here libfake-nvml.so through LUMEN_NVML_LIBRARY,
// two fixed devices) reports GPUs shows each device's utilisation and memory on
// the head's /metrics, exactly as NVML gave them; a node without NVML shows no
// GPU series.
TEST_CASE("the head's /metrics shows each GPU a node samples through NVML") {
  if (MachineHasNvml()) {
    WARN("skipped: this machine has NVML, so no node here is without GPUs");
    return;
  }
  lumen::test::MultiNodeCluster cluster(
      {{.resources = {{"CPU", 1}}},
       {.resources = {{"CPU", 1}}, .env = {{"LUMEN_NVML_LIBRARY", LUMEN_FAKE_NVML_PATH}}}},
      {{"LUMEN_REPORT_PERIOD_MS", "100"}});
  int port = cluster.head_metrics_port();
  REQUIRE(port > 0);
  std::string plain = cluster.node_id(0).substr(0, 12);
  std::string gpu_node = cluster.node_id(1).substr(0, 12);
  std::string page;
  absl::StatusOr<std::vector<lumen::test::PromFamily>> parsed;
  bool reported = WaitUntil([&] {
    auto [status, body] = lumen::test::HttpGet("127.0.0.1", port, "/metrics");
    if (status != 200) return false;
    page = body;
    parsed = lumen::test::ParsePrometheusText(page);
    return parsed.ok() && Sample(*parsed, "lumen_node_gpu_memory_total_bytes",
                                 {{"node", gpu_node}, {"gpu", "1"}}) > 0;
  });
  INFO(page);
  REQUIRE(parsed.ok());
  REQUIRE(reported);
  constexpr double kGiB = 1ull << 30;
  CHECK(Sample(*parsed, "lumen_node_gpu_utilization_ratio", {{"node", gpu_node}, {"gpu", "0"}}) == Approx(0.37));
  CHECK(Sample(*parsed, "lumen_node_gpu_utilization_ratio", {{"node", gpu_node}, {"gpu", "1"}}) == Approx(0.91));
  CHECK(Sample(*parsed, "lumen_node_gpu_memory_used_bytes", {{"node", gpu_node}, {"gpu", "0"}}) == 3 * kGiB);
  CHECK(Sample(*parsed, "lumen_node_gpu_memory_used_bytes", {{"node", gpu_node}, {"gpu", "1"}}) == 70 * kGiB);
  CHECK(Sample(*parsed, "lumen_node_gpu_memory_total_bytes", {{"node", gpu_node}, {"gpu", "0"}}) == 80 * kGiB);
  CHECK(Sample(*parsed, "lumen_node_gpu_info",
               {{"node", gpu_node}, {"gpu", "1"}, {"name", "Fake GPU B"},
                {"uuid", "GPU-fa4e0001-1111-2222-3333-444455556666"}}) == 1);
  CHECK_FALSE(HasSeries(*parsed, "lumen_node_gpu", plain));
  CHECK(HasSeries(*parsed, "lumen_node_info", plain));
}
