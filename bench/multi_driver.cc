#include "bench/multi_driver.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/check.h"
#include "bench/remote_calls.h"
#include "lumen/common/process.h"
#include "lumen/lumen.h"

namespace lumen::bench {
namespace {

long long WallNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct ClientReport {
  long long tasks = 0, begin_ns = 0, end_ns = 0;
};

}  // namespace

int RunDriverClient(double seconds) {
  Init(Config{});
  int rc = 0;
  try {
    Check(SmallValueBatch(1000) == 1000, "a warm-up task returned wrong");
    long long begin = WallNanos();
    auto start = std::chrono::steady_clock::now();
    long long tasks = 0;
    do {
      Check(SmallValueBatch(1000) == 1000, "a task returned wrong");
      tasks += 1000;
    } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
             seconds);
    std::printf("%lld %lld %lld\n", tasks, begin, WallNanos());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "multi_driver client: %s\n", e.what());
    rc = 1;
  }
  Shutdown();
  return rc;
}

void RunMultiDriverMetric(Reporter& out, int drivers, double seconds) {
  out.Value("multi_driver_tasks_async", "tasks/s", [&] {
    // The clients join this embedded cluster through LUMEN_ADDRESS.
    ::setenv("LUMEN_ADDRESS", internal::ClusterAddress().c_str(), 1);
    std::vector<int> pipes;
    std::vector<pid_t> pids;
    const std::string self = SelfExecutablePath();
    const std::string arg = std::to_string(seconds);
    for (int c = 0; c < drivers; ++c) {
      int fds[2];
      if (::pipe(fds) != 0) break;
      pid_t pid = ::fork();
      if (pid == 0) {
        ::dup2(fds[1], STDOUT_FILENO);
        ::close(fds[0]);
        ::execl(self.c_str(), self.c_str(), "microbenchmark", "--client", arg.c_str(),
                static_cast<char*>(nullptr));
        std::_Exit(127);
      }
      ::close(fds[1]);
      if (pid < 0) {
        ::close(fds[0]);
        break;
      }
      pipes.push_back(fds[0]);
      pids.push_back(pid);
    }
    ::unsetenv("LUMEN_ADDRESS");
    std::vector<ClientReport> reports;
    for (size_t c = 0; c < pids.size(); ++c) {
      std::string text;
      char buf[256];
      ssize_t n;
      while ((n = ::read(pipes[c], buf, sizeof(buf))) > 0) text.append(buf, n);
      ::close(pipes[c]);
      int status = 0;
      ::waitpid(pids[c], &status, 0);
      ClientReport r;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
          std::sscanf(text.c_str(), "%lld %lld %lld", &r.tasks, &r.begin_ns, &r.end_ns) == 3) {
        reports.push_back(r);
      }
    }
    Check(static_cast<int>(reports.size()) == drivers,
          std::to_string(drivers - static_cast<int>(reports.size())) + " of " +
              std::to_string(drivers) + " client drivers failed");
    long long total = 0, first = reports[0].begin_ns, last = reports[0].end_ns;
    for (const auto& r : reports) {
      total += r.tasks;
      first = std::min(first, r.begin_ns);
      last = std::max(last, r.end_ns);
    }
    Check(last > first && total > 0, "the client drivers ran no tasks");
    return static_cast<double>(total) / (static_cast<double>(last - first) / 1e9);
  });
}

}  // namespace lumen::bench
