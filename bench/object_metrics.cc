#include "bench/object_metrics.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "bench/check.h"
#include "bench/small_objects.h"
#include "bench/store_put.h"
#include "bench/timeit.h"
#include "lumen/lumen.h"

namespace lumen::bench {
namespace {

// Ray's do_put_small: 100 small puts through the store, in a task.
int PutSmallHundredTimes() {
  for (int i = 0; i < 100; ++i) {
    Check(!PutIntoStore(0).IsNil(), "a put returned a nil ref");
  }
  return 100;
}

// Ray's do_put: 10 puts of a fresh `values`-long int64 array, in a task.
// Ten puts of one array made once: Ray's `np.zeros` per put is never written
// (calloc's fresh zero pages: its copy reads one shared zero page), so a
// vector made, faulted in and zeroed per put did work Ray's does not; reading
// one real array ten times is still more than Ray's copy reads.
int PutTenArrays(uint64_t values) {
  const std::vector<int64_t> array(values);
  for (int i = 0; i < 10; ++i) {
    Check(!Put(array).IsNil(), "a put returned a nil ref");
  }
  return 10;
}

// Ray's create_object_containing_ref: an object holding 10,000 refs to small
// objects put by this task.
std::vector<ObjectRef<int>> CreateObjectContainingRefs() {
  std::vector<ObjectRef<int>> refs;
  refs.reserve(10000);
  for (int i = 0; i < 10000; ++i) refs.push_back(Put(1));
  return refs;
}

}  // namespace
}  // namespace lumen::bench

LUMEN_REMOTE(lumen::bench::PutSmallHundredTimes, lumen::bench::PutTenArrays,
             lumen::bench::CreateObjectContainingRefs);

namespace lumen::bench {

uint64_t LargePutBytes(bool quick) { return (quick ? 10ull : 100ull) * 1024 * 1024 * sizeof(int64_t); }

namespace {

void SmallObjects(Reporter& out) {
  {
    auto value = PutIntoStore(0);
    out.Rate("single_client_get_calls_Plasma_Store", "gets/s", 1,
             [&] { Check(*Get(value) == 0, "get returned the wrong value"); });
  }
  out.Rate("single_client_put_calls_Plasma_Store", "puts/s", 1,
           [] { Check(!PutIntoStore(0).IsNil(), "put returned a nil ref"); });
  out.Rate("multi_client_put_calls_Plasma_Store", "puts/s", 1000, [] {
    std::vector<ObjectRef<int>> tasks;
    for (int i = 0; i < 10; ++i) tasks.push_back(Task(PutSmallHundredTimes).Remote());
    int puts = 0;
    for (const auto& done : Get(tasks)) puts += *done;
    Check(puts == 1000, "the clients made " + std::to_string(puts) + " puts, not 1000");
  });
  // The same calls on the inline path (values under kInlineObjectLimit stay
  // in the owner's memory: lumen::Put's default for small values).
  {
    auto value = Put(0);
    out.Rate("single_client_get_calls_inline", "gets/s", 1,
             [&] { Check(*Get(value) == 0, "get returned the wrong value"); });
  }
  out.Rate("single_client_put_calls_inline", "puts/s", 1,
           [] { Check(!Put(0).IsNil(), "put returned a nil ref"); });
}

}  // namespace

void RunLargePutMetrics(Reporter& out, bool quick) {
  // The arrays are 800 MiB each: not made when LUMEN_BENCH_ONLY leaves both out.
  if (!out.Wants("single_client_put_gigabytes") && !out.Wants("memcpy_gigabytes")) return;
  const uint64_t bytes = LargePutBytes(quick);
  const std::vector<int64_t> array(bytes / sizeof(int64_t), 0);
  {
    ObjectRef<std::vector<int64_t>> last;
    if (out.Rate("single_client_put_gigabytes", "GB/s", static_cast<double>(bytes) / kRayGigabyte,
                 [&] { last = Put(array); })) {
      out.Step("single_client_put_gigabytes", [&] {
        auto view = GetArray(last);
        Check(view.size() == array.size() && view[view.size() - 1] == 0,
              "the last large put reads back wrong");
      });
    }
  }
  {
    // The bound for a put: one copy of the same bytes within this process.
    std::vector<int64_t> dest(array.size(), 1);
    out.Rate("memcpy_gigabytes", "GB/s", static_cast<double>(bytes) / kRayGigabyte, [&] {
      std::memcpy(dest.data(), array.data(), bytes);
      asm volatile("" : : "r"(dest.data()) : "memory");
    });
  }
}

namespace {

void MultiClientPuts(Reporter& out, bool quick) {
  // Ray's multi client put: 10 tasks, each putting 10 arrays of 10 Mi int64
  // (256 Ki in --quick mode).
  const uint64_t values = quick ? 256ull * 1024 : 10ull * 1024 * 1024;
  out.Rate("multi_client_put_gigabytes", "GB/s",
           10.0 * 10.0 * static_cast<double>(values * sizeof(int64_t)) / kRayGigabyte, [&] {
             std::vector<ObjectRef<int>> tasks;
             for (int i = 0; i < 10; ++i) tasks.push_back(Task(PutTenArrays).Remote(values));
             int puts = 0;
             for (const auto& done : Get(tasks)) puts += *done;
             Check(puts == 100, "the clients made " + std::to_string(puts) + " puts, not 100");
           });
}

// The node daemon's memory per small object in its store (target <= 256 B).
void BytesPerSmallObject(Reporter& out, bool quick) {
  if (!out.Wants("bytes_per_small_object")) return;
  const long n = quick ? 20000 : 200000;
  pid_t daemon = EmbeddedNodeDaemon();
  if (daemon == 0) {
    out.Fail("bytes_per_small_object", "cannot find the embedded cluster's node daemon");
    return;
  }
  SmallObjectCost cost;
  if (!out.Step("bytes_per_small_object",
                [&] { cost = MeasureSmallObjects(daemon, n, kSmallObjectPutThreads); })) {
    return;
  }
  out.Value("bytes_per_small_object", "B", [&] { return cost.bytes_per_object; });
  char note[200];
  std::snprintf(note, sizeof(note),
                "bytes_per_small_object: %ld objects in the store, node daemon RssAnon %ld -> "
                "%ld KiB",
                cost.objects, cost.daemon_kib_before, cost.daemon_kib_after);
  out.Note(note);
}

void ObjectContainingRefs(Reporter& out) {
  ObjectRef<std::vector<ObjectRef<int>>> holder;
  bool made = out.Step("single_client_get_object_containing_10k_refs", [&] {
    holder = Task(CreateObjectContainingRefs).Remote();
    auto refs = Get(holder);
    Check(refs->size() == 10000 && *Get(refs->front()) == 1 && *Get(refs->back()) == 1,
          "the object's refs do not lead to their values");
  });
  if (!made) return;
  out.Rate("single_client_get_object_containing_10k_refs", "gets/s", 1, [&] {
    Check(Get(holder)->size() == 10000, "the object does not hold 10,000 refs");
  });
}

}  // namespace

void RunObjectMetrics(Reporter& out, bool quick) {
  SmallObjects(out);
  RunLargePutMetrics(out, quick);
  MultiClientPuts(out, quick);
  ObjectContainingRefs(out);
  BytesPerSmallObject(out, quick);
}

}  // namespace lumen::bench
