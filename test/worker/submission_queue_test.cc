// Deterministic tests of SubmissionQueue, the hand-off of submitted tasks to
// the io thread: tasks made by the test, no processes, no sockets. The
// concurrent case uses real threads but asserts only counts and order.
#include "core/worker/submission_queue.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <thread>
#include <vector>

namespace lumen::runtime {
namespace {

std::unique_ptr<PendingTask> NewTask(uint64_t sequence) {
  auto task = std::make_unique<PendingTask>();
  task->sequence = sequence;  // the test's submission number
  return task;
}

TEST_CASE("a burst of submissions is taken in bounded chunks in order with one drain due at a time",
          "[worker][submission_queue]") {
  // Invariant (issue 17): 20,000 tasks queued at once leave the queue in
  // chunks of at most max_chunk (so the io thread never takes the whole
  // backlog in one turn), in submission order; one drain is asked for by the
  // pushes and exactly one more per further chunk, none once empty.
  constexpr size_t kChunk = 1000;
  constexpr uint64_t kN = 20000;
  SubmissionQueue queue(kChunk);
  int drains_asked = 0;
  for (uint64_t i = 0; i < kN; ++i) {
    if (queue.Push(NewTask(i))) ++drains_asked;
  }
  CHECK(drains_asked == 1);
  uint64_t next = 0;
  int chunks = 0;
  bool more = true;
  while (more) {
    auto chunk = queue.TakeChunk(&more);
    ++chunks;
    REQUIRE(chunk.size() <= kChunk);
    for (const auto& task : chunk) REQUIRE(task->sequence == next++);
  }
  CHECK(next == kN);
  CHECK(chunks == static_cast<int>(kN / kChunk));  // every chunk full
  CHECK(queue.largest_chunk() == kChunk);
  CHECK(queue.chunks_taken() == kN / kChunk);
  // Idle again: the next push asks for a drain.
  CHECK(queue.Push(NewTask(kN)));
  CHECK_FALSE(queue.Push(NewTask(kN + 1)));
  auto rest = queue.TakeChunk(&more);
  CHECK_FALSE(more);
  CHECK(rest.size() == 2);
}

TEST_CASE("pushes during a drain ask for no second drain and TakeAll empties and resets",
          "[worker][submission_queue]") {
  // Invariant: while a drain is due (tasks remain after a chunk, or a push
  // already asked), no push asks again; TakeAll leaves no drain due.
  SubmissionQueue queue(2);
  CHECK(queue.Push(NewTask(0)));
  CHECK_FALSE(queue.Push(NewTask(1)));
  CHECK_FALSE(queue.Push(NewTask(2)));
  bool more = false;
  CHECK(queue.TakeChunk(&more).size() == 2);
  CHECK(more);                          // the drain stays due for task 2
  CHECK_FALSE(queue.Push(NewTask(3)));  // so this push asks for nothing
  auto all = queue.TakeAll();
  REQUIRE(all.size() == 2);
  CHECK(all[0]->sequence == 2);
  CHECK(all[1]->sequence == 3);
  CHECK(queue.Push(NewTask(4)));  // nothing due after TakeAll
  CHECK(queue.TakeChunk(&more).size() == 1);
  CHECK_FALSE(more);
  auto empty = queue.TakeChunk(&more);  // a drain that finds nothing
  CHECK(empty.empty());
  CHECK_FALSE(more);
}

TEST_CASE("concurrent submitters: every task is taken once in its thread's order and no drain is lost",
          "[worker][submission_queue]") {
  // Invariant: with several threads pushing while one thread drains (as the
  // io thread does, draining only when a drain is due), every task comes out
  // exactly once, each thread's tasks in its order, and at the end no task is
  // left without a drain due.
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 20000;
  SubmissionQueue queue(64);
  std::atomic<int> due{0};  // drains asked for and not yet run
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < kPerThread; ++i) {
        if (queue.Push(NewTask(static_cast<uint64_t>(t) << 32 | i))) due.fetch_add(1);
      }
    });
  }
  std::vector<uint64_t> next(kThreads, 0);
  uint64_t taken = 0;
  while (taken < kThreads * kPerThread) {
    if (due.load() == 0) {
      std::this_thread::yield();
      continue;
    }
    due.fetch_sub(1);
    bool more = false;
    for (const auto& task : queue.TakeChunk(&more)) {
      const auto thread = static_cast<size_t>(task->sequence >> 32);
      REQUIRE(thread < next.size());
      REQUIRE((task->sequence & 0xffffffffu) == next[thread]++);
      ++taken;
    }
    if (more) due.fetch_add(1);
  }
  for (auto& thread : threads) thread.join();
  CHECK(taken == kThreads * kPerThread);
  CHECK(due.load() == 0);  // the last chunk left nothing due
  CHECK(queue.largest_chunk() <= 64);
}

}  // namespace
}  // namespace lumen::runtime
