// Posting work to an event loop under a name.
//
//   lumen::Post(io_, "worker.complete_task", [this, id] { CompleteTask(id); });
//
// Every handler a component posts to its io thread goes through Post with a
// name saying what it does. A handler that holds its loop longer than
// Timeouts::slow_handler_warning (LUMEN_SLOW_HANDLER_WARNING_MS) is logged with
// that name: everything else on the loop (heartbeats, replies, other clients)
// waited for it, and the name says where to look.
#pragma once

#include <chrono>
#include <utility>

#include <boost/asio/post.hpp>

namespace lumen {

// Timeouts::FromEnv().slow_handler_warning, read once per process.
std::chrono::steady_clock::duration SlowHandlerThreshold();

// Logs (rate limited) that the handler `name` held its loop for `took`.
void ReportSlowHandler(const char* name, std::chrono::steady_clock::duration took);

// Runs `handler` on `executor` later, as boost::asio::post does; `name` must be
// a string literal (it is kept by pointer). Thread-safe as asio::post is.
template <class Executor, class Handler>
void Post(Executor&& executor, const char* name, Handler&& handler) {
  boost::asio::post(std::forward<Executor>(executor),
                    [name, handler = std::forward<Handler>(handler)]() mutable {
                      const auto start = std::chrono::steady_clock::now();
                      handler();
                      const auto took = std::chrono::steady_clock::now() - start;
                      if (took > SlowHandlerThreshold()) ReportSlowHandler(name, took);
                    });
}

}  // namespace lumen
