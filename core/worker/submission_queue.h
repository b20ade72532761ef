// SubmissionQueue: the hand-off of submitted tasks from the threads that
// submit them to the io thread, which takes them in bounded chunks.
//
//   SubmissionQueue queue(SubmissionQueue::kDefaultChunk);
//   if (queue.Push(std::move(task))) post(drain);      // any thread
//   // drain, on the io thread:
//   bool more = false;
//   for (auto& t : queue.TakeChunk(&more)) handle(std::move(t));
//   if (more) post(drain);                              // the rest, next turn
//
// Why chunks: a driver submitting 100,000 tasks in a loop outruns the io
// thread, and taking the whole backlog in one handler held the io loop for
// 100 to 600 ms on a loaded 2-core machine (LUMEN_SLOW_HANDLER_WARNING_MS
// warnings of 'worker.drain_submissions'), during which no task reply was read
// and no queued task was pushed, so the leased workers idled while the driver
// queued. A chunk of at most `max_chunk` tasks (a few milliseconds of work)
// per turn lets replies and pushes interleave with the submissions.
//
// Exactly one drain is due at a time: Push returns true only when none is
// (the queue was idle), and TakeChunk keeps it due (returns `more`) while
// tasks remain, so the caller posts one drain per burst of submissions plus
// one per further chunk, and no submission waits without a drain due.
// Tasks come out in submission order. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/worker/pending_task.h"

namespace lumen::runtime {

class SubmissionQueue {
 public:
  // At most this many tasks per chunk by default: about 3 to 5 ms of the io
  // thread's work on this kind of machine.
  static constexpr size_t kDefaultChunk = 1024;

  explicit SubmissionQueue(size_t max_chunk = kDefaultChunk);
  SubmissionQueue(const SubmissionQueue&) = delete;
  SubmissionQueue& operator=(const SubmissionQueue&) = delete;

  // Appends `task` (any thread). Returns true when the caller must schedule a
  // drain (none was due); the queue then counts one as due. O(1) amortised.
  [[nodiscard]] bool Push(std::unique_ptr<PendingTask> task);
  // The oldest tasks, at most max_chunk of them, in submission order (the
  // drain's thread). `*more` says whether tasks remain: then the drain stays
  // due and the caller must schedule it again; otherwise none is due any more.
  // O(chunk).
  std::vector<std::unique_ptr<PendingTask>> TakeChunk(bool* more);
  // Everything still queued, in order; no drain is due afterwards (stopping).
  std::vector<std::unique_ptr<PendingTask>> TakeAll();

  // Counters, for tests and benchmarks: chunks taken by TakeChunk (empty ones
  // included) and the largest chunk so far.
  uint64_t chunks_taken() const;
  size_t largest_chunk() const;

 private:
  const size_t max_chunk_;
  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<PendingTask>> tasks_ ABSL_GUARDED_BY(mu_);
  bool drain_due_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t chunks_taken_ ABSL_GUARDED_BY(mu_) = 0;
  size_t largest_chunk_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lumen::runtime
