// How much a large task argument costs the driver: its peak resident memory
// (VmHWM, which counts the shared-memory store pages it writes) while it
// submits one task with a value of SIZE MiB and waits for it.
//
//   large_arg_rss [--mib 1024] [--kind vector|string|buffer] [--legacy]
//
// Prints the value's size, the driver's resident memory with the value in it
// before the call, the peak during it, and the rise in units of the value's size
// ("extra copies"). --legacy submits the argument the way Lumen did before it
// encoded large arguments straight into the store: encoded into a heap string
// first, which the runtime then copied into the store.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "lumen/lumen.h"

namespace {

uint64_t CharCount(std::vector<char> v) { return v.size(); }
uint64_t StringSize(std::string s) { return s.size(); }
uint64_t BufferSize(lumen::Buffer b) { return b.size(); }

uint64_t StatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(field.size())) * 1024;
  }
  return 0;
}

bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return out.good();
}

// The pre-change path: the whole value encoded into a heap string, handed to
// the runtime, which copies it into the store.
template <class T>
lumen::ObjectRef<uint64_t> SubmitLegacy(const char* function, const T& value) {
  std::vector<lumen::internal::TaskArgument> args;
  args.push_back({lumen::codec::EncodeValue<T>(value), nullptr});
  lumen::internal::TaskOptions options;
  options.max_retries = 0;
  return lumen::ObjectRef<uint64_t>(lumen::internal::SubmitTask(function, std::move(args), options));
}

template <class T, class F>
int Measure(const char* function, F f, T value, uint64_t size, bool legacy, const std::string& kind) {
  if (!ResetPeakRss()) std::fprintf(stderr, "cannot reset VmHWM; the peak may be older\n");
  uint64_t before = StatusBytes("VmRSS:");
  uint64_t got = legacy ? *lumen::Get(SubmitLegacy(function, value))
                        : *lumen::Get(lumen::Task(f).SetMaxRetries(0).Remote(value));
  uint64_t peak = StatusBytes("VmHWM:");
  if (got != size) {
    std::fprintf(stderr, "the task saw %llu bytes, expected %llu\n",
                 static_cast<unsigned long long>(got), static_cast<unsigned long long>(size));
    return 1;
  }
  if (kind == "warm-up") return 0;
  double mib = 1024.0 * 1024.0;
  std::printf(
      "%s argument of %.0f MiB (%s path): driver RSS before %.0f MiB, peak %.0f MiB, rise %.0f "
      "MiB = %.2f x the value\n",
      kind.c_str(), size / mib, legacy ? "legacy" : "current", before / mib, peak / mib,
      (peak - before) / mib, static_cast<double>(peak - before) / size);
  return 0;
}

}  // namespace

LUMEN_REMOTE(CharCount, StringSize, BufferSize);

int main(int argc, char** argv) {
  // Arguments are read before Init, which never returns in a worker (this
  // binary re-executed by the node daemon); so nothing here may exit early.
  uint64_t mib = 1024;
  std::string kind = "vector";
  bool legacy = false;
  bool usage = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--mib" && i + 1 < argc) {
      mib = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--kind" && i + 1 < argc) {
      kind = argv[++i];
    } else if (arg == "--legacy") {
      legacy = true;
    } else {
      usage = true;
    }
  }
  // An embedded cluster whose store holds the value twice over.
  lumen::Config config;
  config.num_cpus = 1;
  config.object_store_memory = 2 * (mib << 20) + (256ull << 20);
  lumen::Init(config, argc, argv);
  if (usage || (kind != "vector" && kind != "string" && kind != "buffer")) {
    std::fprintf(stderr, "usage: %s [--mib N] [--kind vector|string|buffer] [--legacy]\n",
                 argv[0]);
    lumen::Shutdown();
    return 2;
  }
  // A worker and its lease are up before measuring.
  uint64_t size = mib << 20;
  int rc = Measure("CharCount", CharCount, std::vector<char>(16), 16, false, "warm-up");
  if (rc == 0 && kind == "vector") {
    std::vector<char> value(size, 'x');
    rc = Measure("CharCount", CharCount, std::move(value), size, legacy, kind);
  } else if (rc == 0 && kind == "string") {
    std::string value(size, 'y');
    rc = Measure("StringSize", StringSize, std::move(value), size, legacy, kind);
  } else if (rc == 0) {
    lumen::Buffer value(std::string(size, 'z'));
    rc = Measure("BufferSize", BufferSize, std::move(value), size, legacy, kind);
  }
  lumen::Shutdown();
  return rc;
}
