// GpuMonitor against libfake-nvml.so (two fixed devices, test/node/fake_nvml.c):
// what it samples, which devices CUDA_VISIBLE_DEVICES selects, and that a
// machine without NVML gets no samples and no log line.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/node/gpu_monitor.h"

using lumen::node::GpuMonitor;
using lumen::node::GpuMonitorOptions;
using lumen::node::GpuSample;

namespace {

constexpr uint64_t kGiB = 1ull << 30;

// The monitor's samples once it has any (its thread samples right after
// initialising NVML), or none after 10 s.
std::vector<GpuSample> FirstSamples(const GpuMonitor& monitor) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::vector<GpuSample> samples;
  while ((samples = monitor.Latest()).empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling a condition with a deadline
  }
  return samples;
}

GpuMonitorOptions Fake(std::optional<std::string> visible = std::nullopt) {
  return GpuMonitorOptions{.library = LUMEN_FAKE_NVML_PATH,
                           .library_named = true,
                           .visible_devices = std::move(visible),
                           .period = std::chrono::milliseconds(20)};
}

}  // namespace

// Invariant: every device NVML lists is reported, in NVML's order, with the
// utilisation as a 0..1 ratio and the memory in bytes NVML gave.
TEST_CASE("the GPU monitor samples every device through NVML") {
  GpuMonitor monitor(Fake());
  REQUIRE(monitor.loaded());
  std::vector<GpuSample> samples = FirstSamples(monitor);
  REQUIRE(samples.size() == 2);
  CHECK(samples[0].index == 0);
  CHECK(samples[0].name == "Fake GPU A");
  CHECK(samples[0].uuid == "GPU-fa4e0000-1111-2222-3333-444455556666");
  REQUIRE(samples[0].utilization.has_value());
  CHECK(*samples[0].utilization == Approx(0.37));
  CHECK(samples[0].memory_used_bytes == 3 * kGiB);
  CHECK(samples[0].memory_total_bytes == 80 * kGiB);
  CHECK(samples[1].index == 1);
  CHECK(samples[1].name == "Fake GPU B");
  CHECK(*samples[1].utilization == Approx(0.91));
  CHECK(samples[1].memory_used_bytes == 70 * kGiB);
}

// Invariant: with CUDA_VISIBLE_DEVICES the node reports only the devices it
// names, numbered in its order as the node's processes see them.
TEST_CASE("the GPU monitor reports the devices CUDA_VISIBLE_DEVICES selects") {
  GpuMonitor second_only(Fake("1"));
  std::vector<GpuSample> one = FirstSamples(second_only);
  REQUIRE(one.size() == 1);
  CHECK(one[0].index == 0);
  CHECK(one[0].name == "Fake GPU B");
  CHECK(one[0].memory_used_bytes == 70 * kGiB);

  GpuMonitor by_uuid(Fake("GPU-fa4e0001,0"));
  std::vector<GpuSample> both = FirstSamples(by_uuid);
  REQUIRE(both.size() == 2);
  CHECK(both[0].name == "Fake GPU B");
  CHECK(both[1].name == "Fake GPU A");
  CHECK(both[1].index == 1);
}

// Invariant: CUDA's rules for CUDA_VISIBLE_DEVICES: indices or (prefixes of)
// UUIDs in the order given; the first entry naming no device, a device twice,
// or an ambiguous prefix ends the list; unset means every device.
TEST_CASE("CUDA_VISIBLE_DEVICES selects devices as CUDA does") {
  std::vector<std::string> uuids = {"GPU-aaa1", "GPU-aab2", "GPU-bbb3"};
  using V = std::vector<unsigned>;
  CHECK(GpuMonitor::SelectDevices(std::nullopt, uuids) == V{0, 1, 2});
  CHECK(GpuMonitor::SelectDevices("", uuids) == V{});
  CHECK(GpuMonitor::SelectDevices("2,0", uuids) == V{2, 0});
  CHECK(GpuMonitor::SelectDevices(" 1 , 2 ", uuids) == V{1, 2});
  CHECK(GpuMonitor::SelectDevices("0,7,1", uuids) == V{0});
  CHECK(GpuMonitor::SelectDevices("1,1,2", uuids) == V{1});
  CHECK(GpuMonitor::SelectDevices("GPU-bbb3,aab", uuids) == V{2, 1});
  CHECK(GpuMonitor::SelectDevices("aa", uuids) == V{});  // ambiguous
  CHECK(GpuMonitor::SelectDevices("-1", uuids) == V{});
}

// Invariant: a machine without NVML's library (no NVIDIA driver) gets no
// samples and not one log line at the default level; the sampling thread is
// not even started.
TEST_CASE("without NVML the GPU monitor reports nothing and logs nothing") {
  GpuMonitorOptions options;  // the driver's libnvidia-ml.so.1, not named by the user
  if (void* real = ::dlopen(options.library.c_str(), RTLD_NOW | RTLD_LOCAL)) {
    ::dlclose(real);
    options.library = "libnvidia-ml-absent-for-this-test.so.1";  // a GPU machine
  }
  // stderr (where LUMEN_LOG writes) to a file while the monitor lives.
  char path[] = "/tmp/lumen-gpu-monitor-log-XXXXXX";
  int file = ::mkstemp(path);
  REQUIRE(file >= 0);
  int saved = ::dup(2);
  ::dup2(file, 2);
  bool loaded = true;
  std::vector<GpuSample> samples;
  {
    GpuMonitor monitor(options);
    loaded = monitor.loaded();
    samples = monitor.Latest();
  }
  ::dup2(saved, 2);
  ::close(saved);
  ::close(file);
  std::ifstream in(path);
  std::stringstream logged;
  logged << in.rdbuf();
  ::unlink(path);
  CHECK_FALSE(loaded);
  CHECK(samples.empty());
  CHECK(logged.str().empty());
}

// Invariant: a library named by LUMEN_NVML_LIBRARY that lacks NVML's entry
// points is refused (not called), with a warning.
TEST_CASE("a library without NVML's entry points is not used") {
  GpuMonitor monitor(GpuMonitorOptions{.library = "libm.so.6", .library_named = true});
  CHECK_FALSE(monitor.loaded());
  CHECK(monitor.Latest().empty());
}
