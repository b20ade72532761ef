#include "lumen/common/accept_retry.h"

#include <utility>

#include <boost/asio/error.hpp>

namespace lumen {

AcceptRetry::AcceptRetry(boost::asio::io_context& io, std::string what,
                         std::chrono::milliseconds delay)
    : what_(std::move(what)), delay_(delay), timer_(io) {}

bool AcceptRetry::Accepted(const boost::system::error_code& ec, bool acceptor_open,
                           std::function<void()> again) {
  if (!ec) return true;
  if (ec == boost::asio::error::operation_aborted || !acceptor_open || stopped_) return false;
  ++errors_;
  uint64_t suppressed = 0;
  if (log_limiter_.Allow(&suppressed)) {
    LUMEN_LOG(WARNING) << what_ << ": accept failed: " << ec.message() << "; retrying in "
                       << delay_.count() << " ms (" << suppressed
                       << " more failures since the last line)";
  }
  timer_.expires_after(delay_);
  timer_.async_wait([this, again = std::move(again)](const boost::system::error_code& wait_ec) {
    if (wait_ec || stopped_) return;  // Stop, or the owner is going
    again();
  });
  return false;
}

void AcceptRetry::Stop() {
  stopped_ = true;
  timer_.cancel();
}

}  // namespace lumen
