#include "core/node/gpu_monitor.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "core/node/nvml_api.h"
#include "lumen/common/logging.h"

namespace lumen::node {

struct GpuMonitor::Api {
  nvml::InitFn init = nullptr;
  nvml::ShutdownFn shutdown = nullptr;
  nvml::ErrorStringFn error_string = nullptr;
  nvml::DeviceGetCountFn get_count = nullptr;
  nvml::DeviceGetHandleByIndexFn get_handle = nullptr;
  nvml::DeviceGetUtilizationRatesFn get_utilization = nullptr;
  nvml::DeviceGetMemoryInfoFn get_memory = nullptr;
  nvml::DeviceGetStringFn get_name = nullptr;
  nvml::DeviceGetStringFn get_uuid = nullptr;

  std::string Error(nvml::Return r) const {
    const char* text = error_string != nullptr ? error_string(r) : nullptr;
    return text != nullptr ? text : "NVML error " + std::to_string(static_cast<int>(r));
  }
};

struct GpuMonitor::Device {
  nvml::Device handle = nullptr;
  uint32_t index = 0;
  std::string name;
  std::string uuid;
};

namespace {

template <class Fn>
bool Resolve(void* library, const char* symbol, Fn* out) {
  *out = reinterpret_cast<Fn>(::dlsym(library, symbol));
  return *out != nullptr;
}

}  // namespace

GpuMonitorOptions GpuMonitorOptions::FromEnv(std::chrono::milliseconds period) {
  GpuMonitorOptions options;
  options.period = period;
  if (const char* lib = std::getenv("LUMEN_NVML_LIBRARY"); lib != nullptr && *lib != '\0') {
    options.library = lib;
    options.library_named = true;
  }
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v != nullptr) options.visible_devices = v;
  return options;
}

GpuMonitor::GpuMonitor(GpuMonitorOptions options) : options_(std::move(options)) {
  // Loading NVML (a search of the library path for it, then its own start)
  // is the thread's first step: the node's start does not wait for it.
  thread_ = std::thread([this] {
    const bool loaded = Load();
    {
      absl::MutexLock lock(&mu_);
      load_done_ = true;
      loaded_ = loaded;
    }
    if (loaded) Run();
  });
}

bool GpuMonitor::Load() {
  // Without NVIDIA's kernel driver (its /proc directory, which containers
  // share with the host) NVML cannot start: skip the search of every library
  // directory for it (~100 system calls per node start where it is absent).
  if (!options_.library_named && ::access("/proc/driver/nvidia", F_OK) != 0) {
    LUMEN_LOG(DEBUG) << "no GPU metrics: no NVIDIA driver (/proc/driver/nvidia)";
    return false;
  }
  // RTLD_LOCAL: NVML's symbols stay out of the daemon's namespace.
  library_ = ::dlopen(options_.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) {
    const char* why = ::dlerror();
    if (options_.library_named) {
      LUMEN_LOG(WARNING) << "no GPU metrics: LUMEN_NVML_LIBRARY=" << options_.library
                         << " does not load: " << (why ? why : "unknown error");
    } else {
      // The usual case on a machine without an NVIDIA driver.
      LUMEN_LOG(DEBUG) << "no GPU metrics: " << (why ? why : options_.library);
    }
    return false;
  }
  auto api = std::make_unique<Api>();
  Resolve(library_, "nvmlErrorString", &api->error_string);  // optional
  bool ok = Resolve(library_, "nvmlInit_v2", &api->init) &&
            Resolve(library_, "nvmlShutdown", &api->shutdown) &&
            Resolve(library_, "nvmlDeviceGetCount_v2", &api->get_count) &&
            Resolve(library_, "nvmlDeviceGetHandleByIndex_v2", &api->get_handle) &&
            Resolve(library_, "nvmlDeviceGetUtilizationRates", &api->get_utilization) &&
            Resolve(library_, "nvmlDeviceGetMemoryInfo", &api->get_memory) &&
            Resolve(library_, "nvmlDeviceGetName", &api->get_name) &&
            Resolve(library_, "nvmlDeviceGetUUID", &api->get_uuid);
  if (!ok) {
    LUMEN_LOG(WARNING) << "no GPU metrics: " << options_.library << " lacks NVML's entry points";
    ::dlclose(library_);
    library_ = nullptr;
    return false;
  }
  api_ = std::move(api);
  return true;
}

GpuMonitor::~GpuMonitor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  if (initialised_) api_->shutdown();
  if (library_ != nullptr) ::dlclose(library_);
}

bool GpuMonitor::loaded() const {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&load_done_));
  return loaded_;
}

std::vector<GpuSample> GpuMonitor::Latest() const {
  absl::MutexLock lock(&mu_);
  return latest_;
}

std::vector<unsigned> GpuMonitor::SelectDevices(std::optional<std::string_view> visible,
                                                const std::vector<std::string>& uuids) {
  std::vector<unsigned> out;
  if (!visible) {
    for (unsigned i = 0; i < uuids.size(); ++i) out.push_back(i);
    return out;
  }
  const absl::string_view list(visible->data(), visible->size());
  for (absl::string_view piece : absl::StrSplit(list, ',')) {
    piece = absl::StripAsciiWhitespace(piece);
    const std::string_view entry(piece.data(), piece.size());
    std::optional<unsigned> found;
    unsigned index = 0;
    if (absl::SimpleAtoi(piece, &index)) {
      if (index < uuids.size()) found = index;
    } else if (!entry.empty()) {
      // A UUID, or a prefix of one that names a single device.
      for (unsigned i = 0; i < uuids.size(); ++i) {
        std::string_view uuid = uuids[i];
        bool match = uuid.substr(0, entry.size()) == entry ||
                     (uuid.rfind("GPU-", 0) == 0 && uuid.substr(4, entry.size()) == entry);
        if (!match) continue;
        if (found) {  // ambiguous
          found.reset();
          break;
        }
        found = i;
      }
    }
    if (!found || std::find(out.begin(), out.end(), *found) != out.end()) break;
    out.push_back(*found);
  }
  return out;
}

bool GpuMonitor::InitDevices() {
  nvml::Return r = api_->init();
  if (r != nvml::kSuccess) {
    // A driver library without a usable driver or device (a container without
    // GPUs): no GPU metrics, nothing wrong with the node.
    LUMEN_LOG(INFO) << "no GPU metrics: NVML does not initialise: " << api_->Error(r);
    return false;
  }
  initialised_ = true;
  unsigned count = 0;
  if (r = api_->get_count(&count); r != nvml::kSuccess) {
    LUMEN_LOG(WARNING) << "no GPU metrics: NVML cannot count devices: " << api_->Error(r);
    return false;
  }
  std::vector<Device> all(count);
  std::vector<std::string> uuids(count);
  for (unsigned i = 0; i < count; ++i) {
    char text[nvml::kStringBuffer] = {0};
    if (api_->get_handle(i, &all[i].handle) != nvml::kSuccess) continue;
    if (api_->get_uuid(all[i].handle, text, sizeof(text)) == nvml::kSuccess) uuids[i] = text;
    all[i].uuid = uuids[i];
    text[0] = '\0';
    if (api_->get_name(all[i].handle, text, sizeof(text)) == nvml::kSuccess) all[i].name = text;
  }
  std::vector<unsigned> selected = SelectDevices(options_.visible_devices, uuids);
  for (unsigned n = 0; n < selected.size(); ++n) {
    Device d = all[selected[n]];
    if (d.handle == nullptr) continue;
    d.index = n;
    devices_.push_back(std::move(d));
  }
  LUMEN_LOG(INFO) << "GPU metrics: " << devices_.size() << " of " << count
                  << " NVML device(s) from " << options_.library;
  return !devices_.empty();
}

std::vector<GpuSample> GpuMonitor::SampleAll() {
  std::vector<GpuSample> out;
  out.reserve(devices_.size());
  for (const Device& d : devices_) {
    GpuSample s{.index = d.index, .name = d.name, .uuid = d.uuid};
    nvml::Utilization utilization{};
    nvml::Return r = api_->get_utilization(d.handle, &utilization);
    if (r == nvml::kSuccess) {
      s.utilization = std::min(100u, utilization.gpu) / 100.0;
    } else if (r != nvml::kNotSupported) {
      LUMEN_LOG(DEBUG) << "GPU " << d.index << ": no utilisation: " << api_->Error(r);
    }
    nvml::Memory memory{};
    if (r = api_->get_memory(d.handle, &memory); r == nvml::kSuccess) {
      s.memory_used_bytes = memory.used;
      s.memory_total_bytes = memory.total;
    } else {
      LUMEN_LOG(DEBUG) << "GPU " << d.index << ": no memory info: " << api_->Error(r);
    }
    out.push_back(std::move(s));
  }
  return out;
}

void GpuMonitor::Run() {
  if (!InitDevices()) return;
  for (;;) {
    std::vector<GpuSample> samples = SampleAll();
    absl::MutexLock lock(&mu_);
    latest_ = std::move(samples);
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(options_.period));
    if (stopping_) return;
  }
}

void FillGpuStats(const std::vector<GpuSample>& samples, capnp::List<proto::GpuStats>::Builder out) {
  for (unsigned i = 0; i < samples.size() && i < out.size(); ++i) {
    const GpuSample& s = samples[i];
    auto g = out[i];
    g.setIndex(s.index);
    g.setName(s.name);
    g.setUuid(s.uuid);
    g.setUtilizationKnown(s.utilization.has_value());
    g.setUtilization(s.utilization.value_or(0));
    g.setMemoryUsedBytes(s.memory_used_bytes);
    g.setMemoryTotalBytes(s.memory_total_bytes);
  }
}

}  // namespace lumen::node
