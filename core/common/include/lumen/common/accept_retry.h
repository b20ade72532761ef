// AcceptRetry: keeps a server's accept loop alive through accept errors.
//
// An accept fails for reasons that pass: the process ran out of descriptors
// (EMFILE/ENFILE), the kernel ran out of buffers (ENOBUFS/ENOMEM), a peer gave
// up before we took its connection (ECONNABORTED). Ending the loop on such an
// error would leave the server deaf for good; retrying at once would spin (the
// pending connection keeps the listener readable). So an accept handler asks
// Accepted first: on success it goes on; on an error it logs (at most a few
// lines a second) and the loop starts again after a short delay; only a closed
// acceptor (operation_aborted, Stop) ends it.
//
//   void Server::Accept() {
//     acceptor_.async_accept([this](const error_code& ec, tcp::socket s) {
//       if (!accept_retry_.Accepted(ec, acceptor_.is_open(), [this] { Accept(); })) return;
//       Serve(std::move(s));
//       Accept();
//     });
//   }
//
// Used by the core worker's, the node daemon's and the head's accept loops.
// Thread-safety: not thread-safe; used on the io thread that runs the acceptor.
// The retry timer runs on `io`; Stop (or destruction) cancels a pending retry.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>

#include "lumen/common/logging.h"

namespace lumen {

class AcceptRetry {
 public:
  // `what` names the listener in log lines ("driver tcp", "node daemon unix").
  AcceptRetry(boost::asio::io_context& io, std::string what,
              std::chrono::milliseconds delay = std::chrono::milliseconds(50));

  // True when `ec` is success: the handler goes on with the accepted socket and
  // starts the next accept. Otherwise false, and: when the acceptor is closed
  // (`acceptor_open` false, or operation_aborted) the loop ends; on any other
  // error `again` (which starts the next accept) runs after the delay.
  bool Accepted(const boost::system::error_code& ec, bool acceptor_open,
                std::function<void()> again);

  // Cancels a pending retry (the acceptor is closing). Idempotent.
  void Stop();

  // Accept errors seen so far (for tests and diagnostics).
  uint64_t errors() const { return errors_; }
  std::chrono::milliseconds delay() const { return delay_; }

 private:
  const std::string what_;
  const std::chrono::milliseconds delay_;
  boost::asio::steady_timer timer_;
  logging::RateLimiter log_limiter_{1, std::chrono::seconds(10)};
  uint64_t errors_ = 0;
  bool stopped_ = false;
};

}  // namespace lumen
