// Posting work to an event loop under a name.
//
//   lumen::Post(io_, "worker.complete_task", [this, id] { CompleteTask(id); });
//
// ReleaseLater(io_, name, object) drops `object` after the running handler.
//
// Every handler a component posts to its io thread goes through Post with a
// name saying what it does. A handler that holds its loop longer than
// Timeouts::slow_handler_warning (LUMEN_SLOW_HANDLER_WARNING_MS) is logged with
// that name: everything else on the loop (heartbeats, replies, other clients)
// waited for it, and the name says where to look.
#pragma once

#include <chrono>
#include <functional>
#include <utility>

#include <boost/asio/post.hpp>

#include "lumen/common/write_batch.h"

namespace lumen {

// Timeouts::FromEnv().slow_handler_warning, read once per process.
std::chrono::steady_clock::duration SlowHandlerThreshold();

// Logs (rate limited) that the handler `name` held its loop for `took`, after
// telling the test observer, if one is set (every report, before the rate limit).
void ReportSlowHandler(const char* name, std::chrono::steady_clock::duration took);

namespace post_internal {
// The time Post measures handlers with: steady_clock::now(), or the test clock
// (TEST_SetPostClock). Thread-safe.
std::chrono::steady_clock::time_point Now();
}  // namespace post_internal

// Runs `handler` on `executor` later, as boost::asio::post does; `name` must be
// a string literal (it is kept by pointer). Thread-safe as asio::post is. The
// handler runs inside a WriteBatch (write_batch.h): the frames it sends to a
// connection go out in one write when it returns.
template <class Executor, class Handler>
void Post(Executor&& executor, const char* name, Handler&& handler) {
  boost::asio::post(std::forward<Executor>(executor),
                    [name, handler = std::forward<Handler>(handler)]() mutable {
                      const auto start = post_internal::Now();
                      // What it sends goes out in one write per connection.
                      WriteBatch batch;
                      handler();
                      const auto took = post_internal::Now() - start;
                      if (took > SlowHandlerThreshold()) ReportSlowHandler(name, took);
                    });
}

// Keeps `object` alive until the handler running now (and whatever called it
// further up the loop's stack) has returned, then drops it: a connection
// closed from inside its own callback, a request's state whose handlers may
// still be on the stack. `object` (a shared_ptr, a unique_ptr, ...) moves into
// a posted handler that does nothing and goes when that handler is destroyed
// (with the io context, if the loop never runs again). `name` as for Post.
//
//   lumen::ReleaseLater(io_, "head.release_closed_connection", std::move(conn));
template <class Executor, class T>
void ReleaseLater(Executor&& executor, const char* name, T object) {
  Post(std::forward<Executor>(executor), name, [keep = std::move(object)] {});
}

// Test hooks, process-wide and thread-safe; pass nullptr (or {}) to restore.
//
// TEST_SetPostClock: Post times handlers with `now` instead of steady_clock
// (a manual clock: the handler under test advances it).
using PostClockFn = std::chrono::steady_clock::time_point (*)();
void TEST_SetPostClock(PostClockFn now);
// TEST_SetSlowHandlerObserver: called with the name and duration of every
// handler reported as slow, on the thread that ran it, before the log line.
using SlowHandlerObserver =
    std::function<void(const char* name, std::chrono::steady_clock::duration took)>;
void TEST_SetSlowHandlerObserver(SlowHandlerObserver observer);

}  // namespace lumen
