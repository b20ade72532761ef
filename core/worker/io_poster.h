// Posts handlers to one runtime's io thread, and refuses them once the runtime
// stops: a handler posted after the io loop's last one would never run, and
// its caller would wait forever.
//
//   IoPoster poster(io);
//   if (!poster.Post("worker.what_it_does", [] { ... })) { /* stopping */ }
//   poster.Close("worker.shutdown", last, /*post_last=*/true);  // Stop
//
// Thread-safe (one mutex, held while posting). Internal to core/worker.
#pragma once

#include <functional>
#include <utility>

#include <boost/asio/io_context.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "lumen/common/post.h"

namespace lumen::runtime {

class IoPoster {
 public:
  // `io` outlives this.
  explicit IoPoster(boost::asio::io_context& io) : io_(io) {}
  IoPoster(const IoPoster&) = delete;
  IoPoster& operator=(const IoPoster&) = delete;

  // Runs `fn` on the io thread under `name` (a string literal,
  // "worker.what_it_does": a slow handler is logged with it); false (and `fn`
  // dropped) once Close has begun. Any thread.
  bool Post(const char* name, std::function<void()> fn) {
    absl::MutexLock lock(&mu_);
    if (!accepting_) return false;
    lumen::Post(io_, name, std::move(fn));
    return true;
  }

  // Refuses every later Post; with `post_last`, posts `last` as the final
  // handler first (under the same lock: nothing can follow it).
  void Close(const char* name, std::function<void()> last, bool post_last) {
    absl::MutexLock lock(&mu_);
    accepting_ = false;
    if (post_last) lumen::Post(io_, name, std::move(last));
  }

 private:
  boost::asio::io_context& io_;
  absl::Mutex mu_;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace lumen::runtime
