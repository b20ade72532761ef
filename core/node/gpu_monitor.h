// GpuMonitor: samples the utilisation and memory of this node's GPUs through
// NVML, for the node's reports to the head (NodeStats.gpus: the head's
// /metrics and dashboard, doc/observability.md).
//
//   GpuMonitor gpus(GpuMonitorOptions::FromEnv(std::chrono::seconds(1)));
//   ...
//   FillGpuStats(gpus.Latest(), stats.initGpus(n));  // each report
//
// NVML is loaded at run time (dlopen of LUMEN_NVML_LIBRARY, else the driver's
// libnvidia-ml.so.1; see nvml_api.h) by the monitor's one thread, so that
// neither loading it nor a slow or hung driver call blocks the node's io
// thread (nor its start: issue 8, init_seconds); the driver's library is not
// looked for where NVIDIA's kernel driver is absent (no /proc/driver/nvidia).
// Without it, or without devices, the thread ends there and Latest() stays
// empty, and only an explicitly named library that does not load is worth a
// warning. With it,
// the thread initialises NVML and samples every device once per `period`. The devices are those
// CUDA_VISIBLE_DEVICES selects (indices or UUIDs, in its order, as CUDA reads
// it), numbered 0.. as the node's processes see them; every device when unset.
//
// Thread-safe: Latest() may be called from any thread (the io thread does).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::node {

// One device as last sampled.
struct GpuSample {
  uint32_t index = 0;  // as this node's processes number it (CUDA_VISIBLE_DEVICES order)
  std::string name;    // "NVIDIA H100 80GB HBM3"
  std::string uuid;    // "GPU-..."
  std::optional<double> utilization;  // 0..1 of NVML's last sample period; none: not supported
  uint64_t memory_used_bytes = 0;
  uint64_t memory_total_bytes = 0;
};

struct GpuMonitorOptions {
  std::string library = "libnvidia-ml.so.1";
  // The library was named by the user (LUMEN_NVML_LIBRARY): failing to load it
  // is a warning, not the normal case of a machine without an NVIDIA driver.
  bool library_named = false;
  // CUDA_VISIBLE_DEVICES as the node daemon has it; nullopt when unset.
  std::optional<std::string> visible_devices;
  std::chrono::milliseconds period{1000};

  // From LUMEN_NVML_LIBRARY and CUDA_VISIBLE_DEVICES.
  static GpuMonitorOptions FromEnv(std::chrono::milliseconds period);
};

class GpuMonitor {
 public:
  explicit GpuMonitor(GpuMonitorOptions options);
  // Stops the sampling thread (waits for a call in progress), shuts NVML down.
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // NVML's library loaded (it may still have no devices or fail to
  // initialise); waits for the thread's attempt to load it.
  bool loaded() const;
  // Each selected device's latest sample, by index; empty without NVML or
  // before the first sample.
  std::vector<GpuSample> Latest() const;

  // The physical NVML indices CUDA_VISIBLE_DEVICES `visible` selects among
  // devices with `uuids` (NVML order), in its order: integers, or UUIDs (a
  // unique prefix is enough, "GPU-" included), comma-separated; as CUDA, the
  // first entry that names no device (or one already named) ends the list.
  // nullopt: every device. Pure.
  static std::vector<unsigned> SelectDevices(std::optional<std::string_view> visible,
                                             const std::vector<std::string>& uuids);

 private:
  struct Api;     // the resolved entry points (nvml_api.h)
  struct Device;  // a selected device: handle, index, name, uuid

  // The sampling thread: initialises NVML and picks the devices, then samples
  // every period until stopped.
  void Run();
  // The thread's first step: dlopen and resolve NVML's entry points.
  bool Load();
  bool InitDevices();
  std::vector<GpuSample> SampleAll();

  const GpuMonitorOptions options_;
  // Set by the thread's Load (read by the destructor after joining it).
  void* library_ = nullptr;  // dlopen handle; nullptr: not loaded
  std::unique_ptr<Api> api_;
  std::vector<Device> devices_;  // the sampling thread's (and the destructor's after joining)
  bool initialised_ = false;     // nvmlInit succeeded (the sampling thread's)
  std::thread thread_;

  mutable absl::Mutex mu_;
  std::vector<GpuSample> latest_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool load_done_ ABSL_GUARDED_BY(mu_) = false;  // the thread tried to load NVML
  bool loaded_ ABSL_GUARDED_BY(mu_) = false;     // ... and did
};

// `samples` as NodeStats.gpus (`out` sized to them).
void FillGpuStats(const std::vector<GpuSample>& samples, capnp::List<proto::GpuStats>::Builder out);

}  // namespace lumen::node
