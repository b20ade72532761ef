// lumen-collective-bench: Lumen's Gloo all-reduce against the same all-reduce
// between two bare processes that use Gloo directly, and the loopback socket
// bound. `lumen microbenchmark` runs it when it is built next to it.
//
//   allreduce_gigabytes            64 MiB of float, 2 actor processes, bus bandwidth
//   gloo_raw_allreduce_gigabytes   the same between two forked processes, Gloo only
//   loopback_tcp_gigabytes         one socket copy between two threads
//   allreduce_latency_us           8-byte all-reduce, per call
//   gloo_raw_allreduce_latency_us  the same, Gloo only
//   allreduce_unverified_*         Lumen with GroupOptions::verify_sizes off: large
//                                  calls skip the shape-check round trip (calls of up
//                                  to kInlineBytes are checked inline either way)
//   reducescatter_gigabytes        64 MiB of float reduce-scattered, 2 actor processes,
//                                  bus bandwidth (input bytes / time × (n−1)/n)
//   gloo_raw_allgather_record_latency_us
//                                  Gloo's allgather of one 1088-byte record per rank
//                                  between bare processes: the exchange a small
//                                  Lumen all-reduce is made of (doc/collective.md)
//
// Bus bandwidth follows nccl-tests: algorithm bandwidth (bytes / time) ×
// 2(n−1)/n, for n = 2 processes. Both sides time the same loops inside the
// member processes (slowest rank), after a warm-up, best window of several.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include "lumen/lumen.h"
#include "lumen/objectstore/transfer.h"
#include "lumen/train/collective.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace col = lumen::collective;

constexpr size_t kBigFloats = (64u << 20) / sizeof(float);
constexpr int kWorld = 2;

struct Timing {
  double big_seconds = 0;    // per 64 MiB all-reduce
  double small_seconds = 0;  // per 8-byte all-reduce
  double record_seconds = 0;          // raw Gloo only: per allgather of one record
  double reduce_scatter_seconds = 0;  // Lumen only: per 64 MiB reduce-scatter
};

// The timed loops, given one all-reduce call; run in every member. A loaded
// machine makes single runs noisy, so each side reports its best window: the
// fastest single 64 MiB all-reduce, and the fastest of 20 windows of small
// ones (the same rule for Lumen and raw Gloo).
template <class AllReduce, class Barrier>
Timing TimeLoops(AllReduce&& all_reduce, Barrier&& barrier, int big_iters, int small_iters) {
  Timing t;
  std::vector<float> big(kBigFloats, 1.f);
  std::vector<float> small(2, 1.f);
  for (int i = 0; i < 2; ++i) all_reduce(big.data(), big.size());
  t.big_seconds = 1e9;
  for (int i = 0; i < big_iters; ++i) {
    barrier();
    auto t0 = Clock::now();
    all_reduce(big.data(), big.size());
    t.big_seconds = std::min(t.big_seconds, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  for (int i = 0; i < 100; ++i) all_reduce(small.data(), small.size());
  t.small_seconds = 1e9;
  constexpr int kWindows = 20;
  const int window = std::max(1, small_iters / kWindows);
  for (int w = 0; w < kWindows; ++w) {
    barrier();
    auto t0 = Clock::now();
    for (int i = 0; i < window; ++i) all_reduce(small.data(), small.size());
    t.small_seconds = std::min(
        t.small_seconds, std::chrono::duration<double>(Clock::now() - t0).count() / window);
  }
  return t;
}

int g_big_iters = 10;
int g_small_iters = 2000;

// Gloo directly: two forked processes, a file store in a scratch directory,
// the ring algorithm for the large buffer and bcube for the small one (what
// lumen::collective picks).
Timing RawGloo() {
  auto dir = std::filesystem::temp_directory_path() /
             ("lumen-gloo-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  int fds[2];
  if (::pipe(fds) != 0) return {};
  std::vector<pid_t> children;
  for (int rank = 0; rank < kWorld; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto device = gloo::transport::tcp::CreateDevice(attr);
      gloo::rendezvous::FileStore store(dir.string());
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, kWorld);
      context->connectFullMesh(store, device);
      uint32_t tag = 0;
      auto all_reduce = [&](float* p, size_t n) {
        gloo::AllreduceOptions opts(context);
        opts.setOutput<float>(p, n);
        opts.setReduceFunction(
            [](void* c, const void* a, const void* b, size_t k) { gloo::sum<float>(c, a, b, k); });
        opts.setAlgorithm(n * sizeof(float) >= (256u << 10) ? gloo::AllreduceOptions::Algorithm::RING
                                                             : gloo::AllreduceOptions::Algorithm::BCUBE);
        opts.setTag(++tag);
        gloo::allreduce(opts);
      };
      auto barrier = [&] {
        gloo::BarrierOptions opts(context);
        opts.setTag(++tag);
        gloo::barrier(opts);
      };
      Timing t = TimeLoops(all_reduce, barrier, g_big_iters, g_small_iters);
      // Lumen's small-call exchange on bare Gloo: an allgather of one
      // col::internal::CallRecord (64-byte header + kInlineBytes) per rank.
      std::vector<uint8_t> record(64 + col::kInlineBytes), records(kWorld * record.size());
      auto all_gather = [&](float*, size_t) {
        gloo::AllgatherOptions opts(context);
        opts.setInput<uint8_t>(record.data(), record.size());
        opts.setOutput<uint8_t>(records.data(), records.size());
        opts.setTag(++tag);
        gloo::allgather(opts);
      };
      t.record_seconds = TimeLoops(all_gather, barrier, 0, g_small_iters).small_seconds;
      ssize_t ignored = ::write(fds[1], &t, sizeof(t));
      (void)ignored;
      std::_Exit(0);
    }
    children.push_back(pid);
  }
  ::close(fds[1]);
  Timing worst;
  for (int i = 0; i < kWorld; ++i) {
    Timing t;
    if (::read(fds[0], &t, sizeof(t)) == sizeof(t)) {
      worst.big_seconds = std::max(worst.big_seconds, t.big_seconds);
      worst.small_seconds = std::max(worst.small_seconds, t.small_seconds);
      worst.record_seconds = std::max(worst.record_seconds, t.record_seconds);
    }
  }
  ::close(fds[0]);
  for (pid_t pid : children) ::waitpid(pid, nullptr, 0);
  std::filesystem::remove_all(dir);
  return worst;
}

class BenchMember {
 public:
  static BenchMember* Create() { return new BenchMember(); }
  std::vector<double> Run(std::string group, int big_iters, int small_iters) {
    auto all_reduce = [&](float* p, size_t n) {
      col::AllReduce(std::span<float>(p, n), col::ReduceOp::kSum, group);
    };
    Timing t = TimeLoops(all_reduce, [&] { col::Barrier(group); }, big_iters, small_iters);
    // Reduce-scatter of the same 64 MiB: the fastest call after a warm-up.
    std::vector<float> in(kBigFloats, 1.f), out(col::ReduceScatterCount(kBigFloats, col::GetRank(group), kWorld));
    double rs = 1e9;
    for (int i = 0; i < big_iters + 1; ++i) {
      col::Barrier(group);
      auto t0 = Clock::now();
      col::ReduceScatter(std::span<const float>(in), std::span<float>(out), col::ReduceOp::kSum, group);
      if (i > 0) rs = std::min(rs, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return {t.big_seconds, t.small_seconds, rs};
  }
};

void Report(const char* name, double value, const char* unit) {
  std::printf("%s %.4g %s\n", name, value, unit);
  std::fflush(stdout);
}

double BusGigabytes(double seconds) {
  double bytes = static_cast<double>(kBigFloats * sizeof(float));
  return bytes / seconds * 2.0 * (kWorld - 1) / kWorld / 1e9;
}

}  // namespace

LUMEN_REMOTE(BenchMember::Create, &BenchMember::Run);

int main(int argc, char** argv) {
  if (const char* role = std::getenv("LUMEN_ROLE"); role && *role) lumen::Init(argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      g_big_iters = 4;
      g_small_iters = 500;
    }
  }
  // Raw Gloo first, in processes forked before this one has any threads.
  Timing raw = RawGloo();
  if (raw.big_seconds == 0) {
    std::fprintf(stderr, "the raw Gloo all-reduce failed\n");
    return 1;
  }

  lumen::Config config;
  config.num_cpus = kWorld;
  lumen::Init(config);
  std::vector<lumen::ActorHandle<BenchMember>> members;
  for (int i = 0; i < kWorld; ++i) members.push_back(lumen::Actor(BenchMember::Create).Remote());
  // "bench" checks every call's shape first (the default); "bench_nv" does not.
  col::CreateGroup(members, {.backend = col::Backend::kGloo, .name = "bench"});
  col::CreateGroup(members, {.backend = col::Backend::kGloo, .name = "bench_nv",
                             .verify_sizes = false});
  auto run = [&](const std::string& group) {
    std::vector<lumen::ObjectRef<std::vector<double>>> runs;
    for (auto& m : members) runs.push_back(m.Task(&BenchMember::Run).Remote(group, g_big_iters, g_small_iters));
    Timing worst;
    for (auto& r : runs) {
      auto v = *lumen::Get(r);
      worst.big_seconds = std::max(worst.big_seconds, v[0]);
      worst.small_seconds = std::max(worst.small_seconds, v[1]);
      worst.reduce_scatter_seconds = std::max(worst.reduce_scatter_seconds, v[2]);
    }
    return worst;
  };
  Timing lumen_t = run("bench");
  Timing unverified = run("bench_nv");
  lumen::Shutdown();
  // With the cluster gone, as the all-reduces ran with nothing else busy.
  double loopback = lumen::objectstore::MeasureLoopbackTcpBytesPerSecond(kBigFloats * sizeof(float));

  Report("allreduce_gigabytes", BusGigabytes(lumen_t.big_seconds), "GB/s");
  Report("gloo_raw_allreduce_gigabytes", BusGigabytes(raw.big_seconds), "GB/s");
  Report("loopback_tcp_gigabytes", loopback / 1e9, "GB/s");
  Report("allreduce_unverified_gigabytes", BusGigabytes(unverified.big_seconds), "GB/s");
  // nccl-tests' reduce-scatter convention: input bytes / time × (n−1)/n.
  Report("reducescatter_gigabytes", BusGigabytes(lumen_t.reduce_scatter_seconds) / 2, "GB/s");
  Report("allreduce_latency_us", lumen_t.small_seconds * 1e6, "us");
  Report("allreduce_unverified_latency_us", unverified.small_seconds * 1e6, "us");
  Report("gloo_raw_allreduce_latency_us", raw.small_seconds * 1e6, "us");
  Report("gloo_raw_allgather_record_latency_us", raw.record_seconds * 1e6, "us");
  return 0;
}
