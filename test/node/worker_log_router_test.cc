// WorkerLogRouter against a driver that does not read: the daemon's io
// thread never blocks on it; lines past the bound are dropped and counted,
// the driver is told the count, and the worker's file keeps every line.
#include "core/node/worker_log_router.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/node/client_registry.h"
#include "lumen/common/connection.h"

namespace {

using lumen::node::ClientRegistry;
using lumen::node::WorkerLogRouter;

size_t LinesIn(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

}  // namespace

// Invariant: forwarding is bounded per driver and never stalls reading the
// pipes; the files are complete whatever the driver does.
TEST_CASE("a driver that does not read loses lines, counted, and the files keep them all") {
  boost::asio::io_context io;
  ClientRegistry clients(io, {});
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  auto conn = clients.Admit(lumen::Socket(io, boost::asio::generic::stream_protocol(AF_UNIX, 0), sv[0]));
  REQUIRE(conn);
  conn->Start([](lumen::Connection&, lumen::proto::Envelope::Reader) {},
              [](lumen::Connection&, const absl::Status&) {});
  std::string dir = std::filesystem::temp_directory_path() /
                    ("lumen-log-router-test-" + std::to_string(::getpid()));
  {
    WorkerLogRouter router(io, clients, lumen::NodeId::Random(),
                           {.log_dir = dir,
                            .max_driver_queue_bytes = 64u << 10,
                            .batch_delay = std::chrono::milliseconds(1),
                            .batch_bytes = 16u << 10});
    int out[2], err[2];
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
    lumen::JobId job = lumen::JobId::Random();
    router.AddWorker(4242, job, out[0], err[0]);
    router.SetDriver(job, conn->id(), /*wants_logs=*/true);
    constexpr int kLines = 20000;  // 2 MB: far past what the socket and the bound take
    std::thread worker([&] {
      std::string line(99, 'x');
      line.push_back('\n');
      for (int i = 0; i < kLines; ++i) {
        const char* p = line.data();
        size_t left = line.size();
        while (left > 0) {
          ssize_t n = ::write(out[1], p, left);
          if (n <= 0) break;
          p += n;
          left -= static_cast<size_t>(n);
        }
      }
      ::close(out[1]);
      ::close(err[1]);
    });
    const std::string file = dir + "/worker-4242.out";
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (LinesIn(file) < kLines && std::chrono::steady_clock::now() < deadline) {
      io.run_for(std::chrono::milliseconds(20));
    }
    worker.join();
    CHECK(LinesIn(file) == kLines);
    CHECK(router.dropped_lines() > 0);
    CHECK(router.dropped_lines() < kLines);
    // What is queued for the driver stays near the bound (plus one batch).
    CHECK(conn->send_queue_bytes() < (64u << 10) + (64u << 10));
  }
  conn->Close(absl::CancelledError("test over"));
  ::close(sv[1]);
  std::filesystem::remove_all(dir);
}
