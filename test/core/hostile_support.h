// Helpers of the hostile-peer tests (hostile_test.cc, hostile_frames_test.cc):
// a cluster started with `lumen start`, raw sockets to its daemons, frames.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <capnp/any.h>
#include <capnp/schema.h>
#include <filesystem>
#include <functional>
#include <set>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lumen/common/head_client.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"
#include "lumen/common/proto_util.h"
#include "test/core/test_support.h"

namespace lumen::test::hostile {

using lumen::test::FilesIn;
using lumen::test::RunCommand;
using lumen::test::WaitUntil;
using Clock = std::chrono::steady_clock;

inline constexpr size_t kMiB = 1 << 20;

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// A cluster started with `lumen start --head` (its own processes, logging to
// the session's logs/), stopped with `lumen stop` at scope exit.
struct DetachedCluster {
  std::string session;
  int head_port = 0;
  std::string token;
  pid_t head_pid = 0;
  pid_t node_pid = 0;
  std::string node_tcp;   // host:port
  std::string node_unix;  // socket path
  std::string node_address;
  lumen::test::StopClustersAtExit stop{LUMEN_CLI_PATH};

  explicit DetachedCluster(const std::string& env, const std::string& flags = "") {
    std::string out;
    int rc = RunCommand(env + " " + LUMEN_CLI_PATH +
                            " start --head --num-cpus 1 --object-store-memory 67108864 " + flags,
                        &out);
    INFO(out);
    REQUIRE(rc == 0);
    auto at = out.find("session: ");
    REQUIRE(at != std::string::npos);
    session = out.substr(at + 9, out.find('\n', at) - at - 9);
    std::ifstream pids(session + "/cluster.pids");
    pids >> head_pid >> node_pid;
    REQUIRE(head_pid > 0);
    REQUIRE(node_pid > 0);
    std::ifstream head(session + "/head_address");
    std::string head_address;
    std::getline(head, head_address);
    head_port = std::stoi(head_address.substr(head_address.rfind(':') + 1));
    std::ifstream token_file(session + "/token");
    std::getline(token_file, token);
    if (!token.empty()) lumen::runtime::SetHeadToken(token);
    auto nodes = lumen::runtime::QueryNodes(head_reach());
    REQUIRE(nodes.ok());
    REQUIRE(nodes->size() == 1);
    std::string address = nodes->front().address;  // "host:port;/unix/path"
    node_address = address;
    node_tcp = address.substr(0, address.find(';'));
    node_unix = address.substr(address.find(';') + 1);
  }
  std::string head_reach() const { return absl::StrCat("127.0.0.1:", head_port); }
  std::string Log(const std::string& role) const {
    std::ifstream in(session + "/logs/" + role + ".log");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

inline Fd ConnectTcp(const std::string& host_port) {
  auto colon = host_port.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(host_port.substr(colon + 1))));
  REQUIRE(::inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &addr.sin_addr) == 1);
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

inline Fd ConnectUnix(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, path.data(), path.size());
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

inline std::string Header(uint32_t length, uint32_t magic = lumen::kFrameMagic) {
  std::string h(8, '\0');
  std::memcpy(h.data(), &length, 4);
  std::memcpy(h.data() + 4, &magic, 4);
  return h;
}

inline void SendAll(int fd, const std::string& bytes) {
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(bytes.size()));
}

inline std::string HelloFrame() {
  lumen::OutMessage out;
  lumen::runtime::InitHello(out.Init(), lumen::proto::Role::CLI);
  std::string frame;
  lumen::AppendFrame(out.builder(), &frame);
  return frame;
}

inline std::string GetNodesFrame(uint64_t request_id) {
  lumen::OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  env.setGetNodes();
  std::string frame;
  lumen::AppendFrame(out.builder(), &frame);
  return frame;
}

// True once the daemon closed `fd`: EOF or a reset, after reading away what it sent.
inline bool ClosedByPeer(int fd) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }
}

// Waits until every fd is closed by the daemon; returns when each closed,
// measured from `start`.
inline std::vector<std::chrono::milliseconds> WaitAllClosed(const std::vector<Fd>& fds, Clock::time_point start,
                                                     std::chrono::milliseconds timeout) {
  std::vector<std::chrono::milliseconds> when(fds.size(), std::chrono::milliseconds(-1));
  WaitUntil(
      [&] {
        bool all = true;
        for (size_t i = 0; i < fds.size(); ++i) {
          if (when[i].count() >= 0) continue;
          if (ClosedByPeer(fds[i].get())) {
            when[i] = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
          } else {
            all = false;
          }
        }
        return all;
      },
      timeout);
  return when;
}

inline size_t CountLines(const std::string& text, const std::string& needle) {
  size_t n = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) n += line.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace lumen::test::hostile
