// lumen::collective on Gloo, between actor processes of a real cluster: every
// operation and element type checked against a result computed here, named
// groups, CreateGroup, barrier, send/recv, a member killed mid all-reduce,
// rebuilding with the survivors, and the rendezvous keys after DestroyGroup.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <climits>
#include <optional>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "lumen/lumen.h"
#include "lumen/train/collective.h"
#include "test/core/test_support.h"

namespace col = lumen::collective;

namespace {

enum Kind { kAllReduce, kAllReduceAsync, kBroadcast, kAllGather, kReduceScatter, kReduce };
enum DTypeIndex { kF32, kF64, kI32, kI64 };

int64_t NowNanos() {  // CLOCK_MONOTONIC: comparable across the processes of a machine
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Rank `rank`'s i-th input element: small integers in [-5, 5], so sums and
// products over a few ranks are exact in every type.
template <class T>
T Value(int rank, size_t i) {
  return static_cast<T>(static_cast<int64_t>(((rank + 1) * 3 + static_cast<int64_t>(i % 1000) * 7) % 11) - 5);
}

template <class T>
std::vector<T> Input(int rank, size_t n) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = Value<T>(rank, i);
  return v;
}

template <class T>
T Combine(T a, T b, col::ReduceOp op) {
  switch (op) {
    case col::ReduceOp::kProduct: return a * b;
    case col::ReduceOp::kMin: return std::min(a, b);
    case col::ReduceOp::kMax: return std::max(a, b);
    default: return a + b;
  }
}

template <class T>
std::vector<T> Reduced(int world, size_t n, col::ReduceOp op) {
  std::vector<T> out = Input<T>(0, n);
  for (int r = 1; r < world; ++r) {
    for (size_t i = 0; i < n; ++i) out[i] = Combine(out[i], Value<T>(r, i), op);
  }
  if (op == col::ReduceOp::kAverage) {
    for (auto& x : out) x = static_cast<T>(x / static_cast<T>(world));
  }
  return out;
}

template <class T>
std::vector<double> ToDouble(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// What rank `rank` should hold after `kind` (nullopt: unspecified).
template <class T>
std::optional<std::vector<double>> Expected(Kind kind, int rank, int world, size_t n,
                                            col::ReduceOp op, int root) {
  switch (kind) {
    case kAllReduce:
    case kAllReduceAsync:
      return ToDouble(Reduced<T>(world, n, op));
    case kReduce:
      if (rank != root) return std::nullopt;
      return ToDouble(Reduced<T>(world, n, op));
    case kBroadcast:
      return ToDouble(Input<T>(root, n));
    case kAllGather: {
      std::vector<T> all;
      for (int r = 0; r < world; ++r) {
        auto in = Input<T>(r, n);
        all.insert(all.end(), in.begin(), in.end());
      }
      return ToDouble(all);
    }
    case kReduceScatter: {
      auto full = Reduced<T>(world, n, op);
      size_t offset = 0;
      for (int r = 0; r < rank; ++r) offset += col::ReduceScatterCount(n, r, world);
      size_t count = col::ReduceScatterCount(n, rank, world);
      return ToDouble(std::vector<T>(full.begin() + offset, full.begin() + offset + count));
    }
  }
  return std::nullopt;
}

template <class T>
std::vector<double> RunTyped(const std::string& group, Kind kind, size_t n, col::ReduceOp op,
                             int root) {
  int rank = col::GetRank(group), world = col::GetWorldSize(group);
  std::vector<T> data = Input<T>(rank, n);
  switch (kind) {
    case kAllReduce:
      col::AllReduce(std::span<T>(data), op, group);
      return ToDouble(data);
    case kAllReduceAsync: {
      auto future = col::AllReduceAsync(std::span<T>(data), op, group);
      future.Wait();
      return ToDouble(data);
    }
    case kBroadcast:
      col::Broadcast(std::span<T>(data), root, group);
      return ToDouble(data);
    case kAllGather: {
      std::vector<T> out(n * world);
      col::AllGather(std::span<const T>(data), std::span<T>(out), group);
      return ToDouble(out);
    }
    case kReduceScatter: {
      std::vector<T> out(col::ReduceScatterCount(n, rank, world));
      col::ReduceScatter(std::span<const T>(data), std::span<T>(out), op, group);
      return ToDouble(out);
    }
    case kReduce:
      col::Reduce(std::span<T>(data), root, op, group);
      return ToDouble(data);
  }
  return {};
}

class Member {
 public:
  static Member* Create() { return new Member(); }
  int Pid() { return ::getpid(); }
  std::string Node() { return lumen::GetNodeId(); }
  void Join(int world, int rank, std::string name, int64_t timeout_ms) {
    col::InitGroup({.world_size = world, .rank = rank, .backend = col::Backend::kGloo,
                    .name = name, .timeout = std::chrono::milliseconds(timeout_ms)});
  }
  void Leave(std::string name) { col::DestroyGroup(name); }
  std::vector<int> RankAndSize(std::string name) {
    return {col::GetRank(name), col::GetWorldSize(name)};
  }
  std::vector<double> Run(std::string group, int kind, int dtype, int op, int64_t n, int root) {
    auto k = static_cast<Kind>(kind);
    auto o = static_cast<col::ReduceOp>(op);
    switch (dtype) {
      case kF32: return RunTyped<float>(group, k, n, o, root);
      case kF64: return RunTyped<double>(group, k, n, o, root);
      case kI32: return RunTyped<int32_t>(group, k, n, o, root);
      default: return RunTyped<int64_t>(group, k, n, o, root);
    }
  }
  // Run, returning "ok" or the CollectiveError's text.
  std::string TryRun(std::string group, int kind, int dtype, int op, int64_t n, int root) {
    try {
      Run(group, kind, dtype, op, n, root);
    } catch (const lumen::CollectiveError& e) {
      return e.what();
    }
    return "ok";
  }
  // Enters the barrier `delay_ms` after being called; returns (entered, left).
  std::vector<int64_t> BarrierTimes(std::string group, int64_t delay_ms) {
    // Staggers the arrivals so that an early exit would show; not a synchronisation.
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    int64_t entered = NowNanos();
    col::Barrier(group);
    return {entered, NowNanos()};
  }
  // An all-reduce of `n` floats; returns "ok" or the error text.
  std::string TryAllReduce(std::string group, int64_t n) {
    std::vector<float> data(n, 1.f);
    try {
      col::AllReduce(std::span<float>(data), col::ReduceOp::kSum, group);
    } catch (const lumen::CollectiveError& e) {
      return e.what();
    }
    return "ok";
  }
  // Three all-reduces in flight at once, waited for in reverse order; returns
  // their results concatenated.
  std::vector<double> AsyncThree(std::string group, int64_t n) {
    int rank = col::GetRank(group);
    std::vector<std::vector<double>> bufs(3, std::vector<double>(n));
    for (int k = 0; k < 3; ++k)
      for (int64_t i = 0; i < n; ++i) bufs[k][i] = Value<double>(rank, i) * (k + 1);
    std::vector<col::CollectiveFuture> futures;
    for (int k = 0; k < 3; ++k) futures.push_back(col::AllReduceAsync(std::span<double>(bufs[k]), col::ReduceOp::kSum, group));
    for (int k = 2; k >= 0; --k) futures[k].Wait();
    std::vector<double> out;
    for (auto& b : bufs) out.insert(out.end(), b.begin(), b.end());
    return out;
  }
  // Rank 0 sends `n` int64 to rank 1, which expects `m`; returns "ok" or the error.
  std::string SendRecvSized(std::string group, int64_t n, int64_t m) {
    try {
      if (col::GetRank(group) == 0) {
        std::vector<int64_t> v(n, 7);
        col::Send(std::span<int64_t>(v), 1, group);
      } else {
        std::vector<int64_t> v(m);
        col::Recv(std::span<int64_t>(v), 0, group);
      }
    } catch (const lumen::CollectiveError& e) {
      return e.what();
    }
    return "ok";
  }
  // Ring: sends its input to rank+1, receives rank-1's.
  std::vector<int64_t> SendRecvRing(std::string group, int64_t n) {
    int rank = col::GetRank(group), world = col::GetWorldSize(group);
    std::vector<int64_t> mine = Input<int64_t>(rank, n), got(n);
    int next = (rank + 1) % world, prev = (rank + world - 1) % world;
    if (rank % 2 == 0) {
      col::Send(std::span<int64_t>(mine), next, group);
      col::Recv(std::span<int64_t>(got), prev, group);
    } else {
      col::Recv(std::span<int64_t>(got), prev, group);
      col::Send(std::span<int64_t>(mine), next, group);
    }
    return got;
  }
  // All-reduces `n` floats `iters` times, announcing itself after the first;
  // returns ("ok" or the error text, nanos when it failed).
  std::tuple<std::string, int64_t> AllReduceLoop(std::string group, int64_t n, int iters) {
    std::vector<float> data(n, 1.f);
    int rank = col::GetRank(group);
    try {
      for (int i = 0; i < iters; ++i) {
        col::AllReduce(std::span<float>(data), col::ReduceOp::kSum, group);
        if (i == 0) lumen::kv::Put("looping/" + std::to_string(rank), "1", "test");
        std::fill(data.begin(), data.end(), 1.f);
      }
    } catch (const lumen::CollectiveError& e) {
      int64_t at = NowNanos();
      // The group is broken: the next call fails at once too.
      std::string next = "next call did not fail";
      try {
        col::AllReduce(std::span<float>(data), col::ReduceOp::kSum, group);
      } catch (const lumen::CollectiveError& again) {
        next = again.what();
      }
      return {std::string(e.what()) + " || " + next, at};
    }
    return {"ok", 0};
  }
};

}  // namespace

LUMEN_REMOTE(Member::Create, &Member::Pid, &Member::Node, &Member::Join, &Member::Leave,
             &Member::RankAndSize, &Member::Run, &Member::BarrierTimes, &Member::SendRecvRing,
             &Member::AllReduceLoop, &Member::AsyncThree,
             &Member::TryAllReduce, &Member::SendRecvSized, &Member::TryRun);

using lumen::test::ScopedCluster;
using MemberHandle = lumen::ActorHandle<Member>;

namespace {

std::vector<MemberHandle> StartMembers(int n) {
  std::vector<MemberHandle> members;
  for (int i = 0; i < n; ++i) members.push_back(lumen::Actor(Member::Create).Remote());
  return members;
}

// Every member joins `name`, member i as rank ranks[i].
void JoinAll(const std::vector<MemberHandle>& members, const std::string& name,
             std::vector<int> ranks = {}, int64_t timeout_ms = 30000) {
  std::vector<lumen::ObjectRef<void>> joins;
  for (size_t i = 0; i < members.size(); ++i) {
    int rank = ranks.empty() ? static_cast<int>(i) : ranks[i];
    joins.push_back(members[i].Task(&Member::Join).Remote(static_cast<int>(members.size()), rank,
                                                          name, timeout_ms));
  }
  for (auto& j : joins) lumen::Get(j);
}

const char* KindName(int k) {
  static const char* kNames[] = {"all_reduce", "all_reduce_async", "broadcast", "all_gather",
                                 "reduce_scatter", "reduce"};
  return kNames[k];
}

// Runs `kind` on every member (member i holding rank ranks[i]) and checks each
// result against the one computed here.
void CheckOp(const std::vector<MemberHandle>& members, const std::string& group, Kind kind,
             int dtype, col::ReduceOp op, size_t n, int root, std::vector<int> ranks = {}) {
  int world = static_cast<int>(members.size());
  std::vector<lumen::ObjectRef<std::vector<double>>> results;
  for (const auto& m : members) {
    results.push_back(m.Task(&Member::Run).Remote(group, static_cast<int>(kind), dtype,
                                                  static_cast<int>(op), static_cast<int64_t>(n),
                                                  root));
  }
  for (int i = 0; i < world; ++i) {
    int rank = ranks.empty() ? i : ranks[i];
    auto got = *lumen::Get(results[i]);
    std::optional<std::vector<double>> want;
    switch (dtype) {
      case kF32: want = Expected<float>(kind, rank, world, n, op, root); break;
      case kF64: want = Expected<double>(kind, rank, world, n, op, root); break;
      case kI32: want = Expected<int32_t>(kind, rank, world, n, op, root); break;
      default: want = Expected<int64_t>(kind, rank, world, n, op, root); break;
    }
    if (!want) continue;
    INFO(KindName(kind) << " dtype " << dtype << " op " << static_cast<int>(op) << " n " << n
                        << " rank " << rank << " of " << world << " root " << root);
    REQUIRE(got == *want);
  }
}

const std::vector<col::ReduceOp> kOps = {col::ReduceOp::kSum, col::ReduceOp::kProduct,
                                         col::ReduceOp::kMin, col::ReduceOp::kMax,
                                         col::ReduceOp::kAverage};

// Sizes: empty, one, not divisible by 2 or 3, the largest that travels inline
// for 4-byte types (col::kInlineBytes; twice that for 8-byte ones), and over
// the ring threshold.
const std::vector<size_t> kSizes = {0, 1, 7, 256, 1001, 100003};

void CheckEveryOp(const std::vector<MemberHandle>& members, const std::string& group) {
  int world = static_cast<int>(members.size());
  for (int dtype : {kF32, kF64, kI32, kI64}) {
    for (size_t n : kSizes) {
      for (auto op : kOps) {
        CheckOp(members, group, kAllReduce, dtype, op, n, 0);
        CheckOp(members, group, kReduceScatter, dtype, op, n, 0);
      }
      CheckOp(members, group, kAllReduceAsync, dtype, col::ReduceOp::kSum, n, 0);
      CheckOp(members, group, kReduce, dtype, col::ReduceOp::kSum, n, world - 1);
      CheckOp(members, group, kReduce, dtype, col::ReduceOp::kMax, n, 0);
      CheckOp(members, group, kBroadcast, dtype, col::ReduceOp::kSum, n, world - 1);  // non-zero root
      CheckOp(members, group, kAllGather, dtype, col::ReduceOp::kSum, n, 0);
    }
  }
}

// Reduce-scatters over 1 KiB keep Gloo's algorithm for their shape (the two
// most recent shapes): the same shape again, shapes alternating, and a third
// shape that evicts one, each checked.
void CheckReduceScatterReuse(const std::vector<MemberHandle>& members, const std::string& group) {
  const std::vector<std::tuple<int, col::ReduceOp, size_t>> calls = {
      {kF32, col::ReduceOp::kSum, 1001},  {kF32, col::ReduceOp::kSum, 1001},
      {kI64, col::ReduceOp::kMax, 5000},  {kF32, col::ReduceOp::kSum, 1001},
      {kF64, col::ReduceOp::kMin, 3001},  {kI64, col::ReduceOp::kMax, 5000},
      {kF32, col::ReduceOp::kSum, 1001},  {kF32, col::ReduceOp::kAverage, 100003},
      {kF32, col::ReduceOp::kAverage, 100003}};
  for (const auto& [dtype, op, n] : calls) CheckOp(members, group, kReduceScatter, dtype, op, n, 0);
}

}  // namespace

TEST_CASE("collective: every op and dtype between 3 actors, checked against a local result") {
  ScopedCluster cluster;
  auto members = StartMembers(3);
  JoinAll(members, "g3");
  for (int i = 0; i < 3; ++i) {
    REQUIRE(*lumen::Get(members[i].Task(&Member::RankAndSize).Remote(std::string("g3"))) ==
            std::vector<int>{i, 3});
  }
  CheckEveryOp(members, "g3");
  CheckReduceScatterReuse(members, "g3");

  // Several asynchronous all-reduces in flight: each result is right.
  const int64_t n = 70001;
  std::vector<double> want;
  auto sum = Reduced<double>(3, n, col::ReduceOp::kSum);
  for (int k = 0; k < 3; ++k)
    for (double x : sum) want.push_back(x * (k + 1));
  std::vector<lumen::ObjectRef<std::vector<double>>> got;
  for (auto& m : members) got.push_back(m.Task(&Member::AsyncThree).Remote(std::string("g3"), n));
  for (auto& g : got) REQUIRE(*lumen::Get(g) == want);
}

TEST_CASE("collective: every op and dtype between 2 actors") {
  ScopedCluster cluster;
  auto members = StartMembers(2);
  JoinAll(members, "g2");
  CheckEveryOp(members, "g2");
  CheckReduceScatterReuse(members, "g2");
}

TEST_CASE("collective: two named groups used at once by the same actors, CreateGroup from the driver") {
  ScopedCluster cluster;
  auto members = StartMembers(3);
  JoinAll(members, "a");                   // member i is rank i
  JoinAll(members, "b", {2, 0, 1});        // another order
  col::CreateGroup(members, {.backend = col::Backend::kGloo, .name = "c"});
  for (int i = 0; i < 3; ++i) {
    REQUIRE(*lumen::Get(members[i].Task(&Member::RankAndSize).Remote(std::string("c"))) ==
            std::vector<int>{i, 3});
  }
  // Interleaved: calls on a, b and c in flight together.
  CheckOp(members, "a", kAllReduce, kF32, col::ReduceOp::kSum, 1001, 0);
  CheckOp(members, "b", kAllGather, kI64, col::ReduceOp::kSum, 5, 0, {2, 0, 1});
  CheckOp(members, "c", kBroadcast, kF64, col::ReduceOp::kSum, 9, 2);
  CheckOp(members, "b", kReduceScatter, kI32, col::ReduceOp::kMax, 10, 0, {2, 0, 1});
  CheckOp(members, "a", kAllReduce, kI32, col::ReduceOp::kProduct, 7, 0);
}

// Invariant: no rank leaves the barrier before the last rank entered it.
TEST_CASE("collective: barrier holds every rank until all arrived (timestamps)") {
  ScopedCluster cluster;
  auto members = StartMembers(3);
  JoinAll(members, "bar");
  for (int round = 0; round < 3; ++round) {
    std::vector<lumen::ObjectRef<std::vector<int64_t>>> times;
    for (int i = 0; i < 3; ++i) {
      // The last rank to be called arrives 200 ms after the first.
      int64_t delay = ((i + round) % 3) * 100;
      times.push_back(members[i].Task(&Member::BarrierTimes).Remote(std::string("bar"), delay));
    }
    int64_t last_entry = 0, first_exit = INT64_MAX, first_entry = INT64_MAX;
    for (auto& t : times) {
      auto v = *lumen::Get(t);
      last_entry = std::max(last_entry, v[0]);
      first_entry = std::min(first_entry, v[0]);
      first_exit = std::min(first_exit, v[1]);
    }
    INFO("round " << round);
    CHECK(last_entry - first_entry > 100'000'000);  // the arrivals really were apart
    CHECK(first_exit >= last_entry);
  }
}

TEST_CASE("collective: send and recv between ranks") {
  ScopedCluster cluster;
  auto members = StartMembers(3);
  JoinAll(members, "p2p");
  for (int64_t n : {1, 1000, 300000}) {
    std::vector<lumen::ObjectRef<std::vector<int64_t>>> got;
    for (auto& m : members) got.push_back(m.Task(&Member::SendRecvRing).Remote(std::string("p2p"), n));
    for (int r = 0; r < 3; ++r) {
      INFO("n " << n << " rank " << r);
      REQUIRE(*lumen::Get(got[r]) == Input<int64_t>((r + 2) % 3, n));
    }
  }
  // A receiver whose buffer has another size gets an error, and the pair
  // stays usable; empty messages work.
  std::vector<MemberHandle> pair = {members[0], members[1]};
  for (auto [n, m] : {std::pair<int64_t, int64_t>{100, 10}, {10, 100}, {0, 0}, {5, 5}}) {
    auto s0 = pair[0].Task(&Member::SendRecvSized).Remote(std::string("p2p"), n, m);
    auto s1 = pair[1].Task(&Member::SendRecvSized).Remote(std::string("p2p"), n, m);
    INFO(n << " -> " << m);
    CHECK(*lumen::Get(s0) == "ok");
    std::string r1 = *lumen::Get(s1);
    if (n == m) {
      CHECK(r1 == "ok");
    } else {
      CHECK(r1.find("rank 0 sent " + std::to_string(n * 8) + " bytes into a buffer of " +
                    std::to_string(m * 8)) != std::string::npos);
    }
  }
}

namespace {

// Invariant: when a member dies mid all-reduce, each survivor's pending call
// fails with CollectiveError naming the group and the dead rank within the
// group's timeout, and its next call fails at once; the survivors then build a
// new group that works, and DestroyGroup leaves no rendezvous keys.
void KillMidAllReduceAndRebuild(int64_t n) {
  constexpr int64_t kTimeoutMs = 5000;
  auto members = StartMembers(3);
  JoinAll(members, "f", {}, kTimeoutMs);
  REQUIRE_FALSE(lumen::kv::Keys("f/", "lumen.collective").empty());
  int victim = *lumen::Get(members[2].Task(&Member::Pid).Remote());

  std::vector<lumen::ObjectRef<std::tuple<std::string, int64_t>>> loops;
  for (auto& m : members) {
    loops.push_back(m.Task(&Member::AllReduceLoop).Remote(std::string("f"), n, 100000));
  }
  for (int r = 0; r < 3; ++r) {
    REQUIRE(lumen::kv::Wait("looping/" + std::to_string(r), std::chrono::seconds(60), "test"));
  }
  int64_t killed_at = NowNanos();
  REQUIRE(::kill(victim, SIGKILL) == 0);

  for (int r = 0; r < 2; ++r) {
    auto [error, failed_at] = *lumen::Get(loops[r], std::chrono::seconds(60));
    INFO("rank " << r << ": " << error);
    CHECK(error.find("collective group 'f'") != std::string::npos);
    CHECK(error.find("rank 2") != std::string::npos);
    CHECK(error.find("is broken") != std::string::npos);  // the next call
    CHECK(failed_at > killed_at);
    // Within the group timeout, plus slack for a loaded 2-core test machine.
    CHECK(failed_at - killed_at < (kTimeoutMs + 4000) * 1'000'000);
  }
  CHECK_THROWS(lumen::Get(loops[2]));  // the dead member's call

  std::vector<MemberHandle> survivors = {members[0], members[1]};
  for (auto& m : survivors) lumen::Get(m.Task(&Member::Leave).Remote(std::string("f")));
  CHECK(lumen::kv::Keys("f/", "lumen.collective").empty());
  JoinAll(survivors, "f", {}, kTimeoutMs);
  CheckOp(survivors, "f", kAllReduce, kF32, col::ReduceOp::kSum, 100003, 0);
  CheckOp(survivors, "f", kAllReduce, kI64, col::ReduceOp::kAverage, 11, 0);
  for (auto& m : survivors) lumen::Get(m.Task(&Member::Leave).Remote(std::string("f")));
  CHECK(lumen::kv::Keys("f/", "lumen.collective").empty());
}

}  // namespace

TEST_CASE("collective: a member killed mid all-reduce fails the others in time, survivors rebuild") {
  ScopedCluster cluster;
  KillMidAllReduceAndRebuild(int64_t{16} << 20);  // 64 MiB: Gloo's ring
}

TEST_CASE("collective: a member killed mid small all-reduces fails the others in time") {
  ScopedCluster cluster;
  KillMidAllReduceAndRebuild(2);  // 8 bytes: inline in the shape-check exchange
}

TEST_CASE("collective: usage errors name the group and leave it usable") {
  ScopedCluster cluster;
  CHECK_THROWS_AS(col::GetRank("nope"), lumen::CollectiveError);
  CHECK_THROWS_WITH(col::InitGroup({.world_size = 2, .rank = 2, .name = "x"}),
                    Catch::Contains("rank 2 is not in a group of 2"));
  // NCCL without a GPU (or without an NCCL build) fails cleanly, saying why;
  // on a GPU machine the one-member group works.
  try {
    col::InitGroup({.world_size = 1, .rank = 0, .backend = col::Backend::kNccl, .name = "gpu"});
    col::DestroyGroup("gpu");
  } catch (const lumen::CollectiveError& e) {
    std::string why = e.what();
    CHECK((why.find("CUDA") != std::string::npos || why.find("NCCL") != std::string::npos));
    CHECK_FALSE(col::IsGroupInitialized("gpu"));
  }
  // A one-member group runs in the driver itself.
  col::InitGroup({.world_size = 1, .rank = 0, .name = "solo"});
  std::vector<float> v{1, 2, 3};
  col::AllReduce(std::span<float>(v), col::ReduceOp::kSum, "solo");
  CHECK(v == std::vector<float>{1, 2, 3});
  std::vector<float> out(2);
  CHECK_THROWS_WITH(col::AllGather(std::span<float>(v), std::span<float>(out), "solo"),
                    Catch::Contains("all_gather output holds 2 elements"));
  CHECK_THROWS_AS(col::Broadcast(std::span<float>(v), 1, "solo"), lumen::CollectiveError);
  // 16-bit elements and CUDA streams are NCCL's: a Gloo group refuses them.
  std::vector<col::Half> halves(3);
  CHECK_THROWS_WITH(col::AllReduce(std::span<col::Half>(halves), col::ReduceOp::kSum, "solo"),
                    Catch::Contains("float16 elements needs an NCCL group"));
  std::vector<col::BFloat16> bf(3);
  CHECK_THROWS_WITH(col::Broadcast(std::span<col::BFloat16>(bf), 0, "solo"),
                    Catch::Contains("bfloat16 elements needs an NCCL group"));
  auto* some_stream = reinterpret_cast<CUstream_st*>(uintptr_t{0x1234});
  CHECK_THROWS_WITH(col::AllReduce(std::span<float>(v), col::ReduceOp::kSum, "solo", some_stream),
                    Catch::Contains("was given a CUDA stream"));
  col::AllReduce(std::span<float>(v), col::ReduceOp::kSum, "solo", col::CudaStream::PerThread());
  col::AllReduce(std::span<float>(v), col::ReduceOp::kMax, "solo");  // still usable
  col::DestroyGroup("solo");
  CHECK_FALSE(col::IsGroupInitialized("solo"));
  CHECK(lumen::kv::Keys("solo/", "lumen.collective").empty());
}

TEST_CASE("collective: a group across two nodes of a loopback cluster") {
  lumen::test::MultiNodeCluster cluster(
      {{{{"CPU", 2}, {"node_a", 2}}}, {{{"CPU", 2}, {"node_b", 2}}}});
  std::vector<MemberHandle> members = {
      lumen::Actor(Member::Create).SetResource("node_a", 1).Remote(),
      lumen::Actor(Member::Create).SetResource("node_b", 1).Remote(),
      lumen::Actor(Member::Create).SetResource("node_a", 1).Remote()};
  std::string a = *lumen::Get(members[0].Task(&Member::Node).Remote());
  std::string b = *lumen::Get(members[1].Task(&Member::Node).Remote());
  REQUIRE(a != b);
  REQUIRE(*lumen::Get(members[2].Task(&Member::Node).Remote()) == a);
  col::CreateGroup(members, {.backend = col::Backend::kGloo, .name = "x"});
  for (int dtype : {kF32, kI64}) {
    for (size_t n : {size_t{0}, size_t{7}, size_t{100003}}) {
      CheckOp(members, "x", kAllReduce, dtype, col::ReduceOp::kSum, n, 0);
      CheckOp(members, "x", kAllReduce, dtype, col::ReduceOp::kAverage, n, 0);
      CheckOp(members, "x", kReduceScatter, dtype, col::ReduceOp::kMin, n, 0);
      CheckOp(members, "x", kBroadcast, dtype, col::ReduceOp::kSum, n, 1);
      CheckOp(members, "x", kAllGather, dtype, col::ReduceOp::kSum, n, 0);
    }
  }
  for (auto& m : members) lumen::Get(m.Task(&Member::Leave).Remote(std::string("x")));
  CHECK(lumen::kv::Keys("x/", "lumen.collective").empty());
}

// Invariant: ranks that disagree on the size fail with CollectiveError (no hang
// past the timeout, no silently wrong data).
TEST_CASE("collective: mismatched sizes across ranks fail instead of hanging") {
  ScopedCluster cluster;
  auto members = StartMembers(2);
  JoinAll(members, "mm", {}, 3000);
  for (auto [a, b] : {std::pair<int64_t, int64_t>{10, 20}, {100000, 300000}}) {
    auto start = std::chrono::steady_clock::now();
    auto r0 = members[0].Task(&Member::TryAllReduce).Remote(std::string("mm"), a);
    auto r1 = members[1].Task(&Member::TryAllReduce).Remote(std::string("mm"), b);
    std::string e0 = *lumen::Get(r0), e1 = *lumen::Get(r1);
    INFO(a << " vs " << b << ": " << e0 << " | " << e1);
    CHECK(e0 != "ok");
    CHECK(e1 != "ok");
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
    CHECK(e0.find("different shapes") != std::string::npos);
    CHECK(e1.find("different shapes") != std::string::npos);
  }
  // The group is still usable after a detected mismatch.
  CheckOp(members, "mm", kAllReduce, kF32, col::ReduceOp::kSum, 1000, 0);
}

// Invariant: every way two ranks' calls can disagree — a small call against a
// large one, the element type, the operation, the root, the reduction —
// fails on both ranks with CollectiveError naming the other rank's call, fast,
// and leaves the group usable.
TEST_CASE("collective: calls that disagree in size, type, operation or root fail on every rank") {
  ScopedCluster cluster;
  auto members = StartMembers(2);
  JoinAll(members, "mx", {}, 3000);
  struct Call {
    Kind kind;
    int dtype;
    col::ReduceOp op;
    int64_t n;
    int root;
  };
  const auto sum = col::ReduceOp::kSum;
  const std::vector<std::pair<Call, Call>> cases = {
      {{kAllReduce, kF32, sum, 2, 0}, {kAllReduce, kF32, sum, 100000, 0}},   // inline vs large
      {{kAllReduce, kF32, sum, 100000, 0}, {kAllReduce, kF32, sum, 2, 0}},   // large vs inline
      {{kAllReduce, kF32, sum, 100, 0}, {kAllReduce, kI32, sum, 100, 0}},    // type
      {{kAllReduce, kF64, sum, 5000, 0}, {kAllReduce, kI64, sum, 5000, 0}},  // type, large
      {{kAllReduce, kF32, sum, 100, 0}, {kBroadcast, kF32, sum, 100, 0}},    // operation
      {{kBroadcast, kI64, sum, 9, 0}, {kBroadcast, kI64, sum, 9, 1}},        // root
      {{kAllReduce, kI32, sum, 9, 0}, {kAllReduce, kI32, col::ReduceOp::kMax, 9, 0}},  // reduction
      {{kAllGather, kF64, sum, 5000, 0}, {kAllGather, kF64, sum, 5001, 0}},  // all_gather, large
      {{kReduceScatter, kF32, sum, 7, 0}, {kReduceScatter, kF32, sum, 8, 0}},
  };
  for (const auto& [c0, c1] : cases) {
    auto start = std::chrono::steady_clock::now();
    auto r0 = members[0].Task(&Member::TryRun).Remote(std::string("mx"), static_cast<int>(c0.kind),
                                                      c0.dtype, static_cast<int>(c0.op), c0.n, c0.root);
    auto r1 = members[1].Task(&Member::TryRun).Remote(std::string("mx"), static_cast<int>(c1.kind),
                                                      c1.dtype, static_cast<int>(c1.op), c1.n, c1.root);
    std::string e0 = *lumen::Get(r0), e1 = *lumen::Get(r1);
    INFO(KindName(c0.kind) << " " << c0.n << " vs " << KindName(c1.kind) << " " << c1.n << ": " << e0
                           << " | " << e1);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
    CHECK(e0.find("different shapes") != std::string::npos);
    CHECK(e1.find("different shapes") != std::string::npos);
    // Each names the other's call.
    CHECK(e0.find("rank 1: " + std::string(KindName(c1.kind)) + " of " + std::to_string(c1.n)) !=
          std::string::npos);
    CHECK(e1.find("rank 0: " + std::string(KindName(c0.kind)) + " of " + std::to_string(c0.n)) !=
          std::string::npos);
  }
  // Still usable, inline and large.
  CheckOp(members, "mx", kAllReduce, kF32, col::ReduceOp::kSum, 3, 0);
  CheckOp(members, "mx", kReduceScatter, kI64, col::ReduceOp::kSum, 100003, 0);
}
