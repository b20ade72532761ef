// A userspace TCP forwarder that makes one link lossy, for the lossy-links
// test (reliability item 8; `tc netem` is not available here): it listens on
// an address of its own and forwards every connection to `target`, and on
// each chunk it reads (up to 16 KiB, either direction) it
//   - waits a random 0..max_delay (order within a direction is kept),
//   - with probability reset_probability resets the connection instead (RST to
//     both peers, through SO_LINGER 0),
//   - writes the chunk one byte per write (TCP_NODELAY: separate segments), so
//     the peer sees frames arrive in pieces.
// Random choices come from `seed`. Runs on a thread of its own.
//
//   FaultProxy proxy({.target = head_address, .seed = seed});
//   config.address = proxy.address();      // the driver reaches the head through it
//
// Thread-safe: the counters may be read from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>

namespace lumen::test::chaos {

class FaultProxy {
 public:
  struct Options {
    std::string target;                       // HOST:PORT to forward to
    std::string listen_host = "127.0.0.1";
    std::chrono::milliseconds max_delay{80};  // per chunk, uniform in [0, max_delay]
    double reset_probability = 0.01;          // per chunk
    bool split_writes = true;                 // one byte per write
    uint64_t seed = 1;
  };
  explicit FaultProxy(Options options);
  // Stops forwarding and closes every connection.
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  // HOST:PORT it listens on.
  const std::string& address() const { return address_; }
  uint64_t connections() const { return connections_.load(); }
  uint64_t resets() const { return resets_.load(); }
  uint64_t chunks() const { return chunks_.load(); }
  // Stops or resumes resetting (delays and splitting go on).
  void set_resets(bool on) { resets_on_.store(on); }
  // While on, what the target sends is read and thrown away (counted in
  // dropped()): bytes written into the link that never arrive, as before a
  // link dies. The other direction goes on.
  void set_drop_from_target(bool on) { drop_from_target_.store(on); }
  uint64_t dropped() const { return dropped_.load(); }
  // Resets every connection open now (RST to both peers, counted in
  // resets()), on the proxy's thread; returns once that is done.
  void ResetAll();

 private:
  struct Link;
  void Accept();

  Options options_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::string address_;
  std::atomic<uint64_t> connections_{0}, resets_{0}, chunks_{0};
  std::atomic<bool> resets_on_{true};
  std::atomic<bool> drop_from_target_{false};
  std::atomic<uint64_t> dropped_{0};
  std::shared_ptr<struct ProxyRandom> random_;  // io thread only
  std::vector<std::weak_ptr<Link>> links_;      // io thread only
  std::thread thread_;
};

}  // namespace lumen::test::chaos
