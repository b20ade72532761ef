// The few NVML types and entry points GpuMonitor resolves at run time with
// dlopen/dlsym (no link dependency on libnvidia-ml, no build requirement on
// the CUDA Toolkit). Where the Toolkit's nvml.h was found at build time
// (LUMEN_HAVE_NVML_H, set by core/node/CMakeLists.txt) the types come from it
// and the function types below are checked against its prototypes; otherwise
// they are declared here. NVML's C ABI for these entry points is stable: the
// _v2 functions and nvmlUtilization_t / nvmlMemory_t (v1) have kept their
// signatures and layouts since R319, and NVIDIA adds new versions under new
// names rather than changing these, so the declarations match every driver
// that exports them. Internal to core/node.
#pragma once

#if defined(LUMEN_HAVE_NVML_H)
#include <nvml.h>

#include <type_traits>
#endif

namespace lumen::node::nvml {

#if defined(LUMEN_HAVE_NVML_H)
using Return = nvmlReturn_t;
using Device = nvmlDevice_t;
using Utilization = nvmlUtilization_t;
using Memory = nvmlMemory_t;
#else
using Return = int;  // nvmlReturn_t: a C enum, int-sized
using Device = struct nvmlDevice_st*;
struct Utilization {
  unsigned int gpu;     // percent of the sample period a kernel ran
  unsigned int memory;  // percent of it device memory was read or written
};
struct Memory {
  unsigned long long total;  // bytes
  unsigned long long free;
  unsigned long long used;
};
#endif

inline constexpr int kSuccess = 0;           // NVML_SUCCESS
inline constexpr int kNotSupported = 3;      // NVML_ERROR_NOT_SUPPORTED
inline constexpr unsigned kStringBuffer = 96;  // >= NVML_DEVICE_NAME_V2_BUFFER_SIZE, _UUID_V2_

using InitFn = Return (*)();
using ShutdownFn = Return (*)();
using ErrorStringFn = const char* (*)(Return);
using DeviceGetCountFn = Return (*)(unsigned int*);
using DeviceGetHandleByIndexFn = Return (*)(unsigned int, Device*);
using DeviceGetUtilizationRatesFn = Return (*)(Device, Utilization*);
using DeviceGetMemoryInfoFn = Return (*)(Device, Memory*);
using DeviceGetStringFn = Return (*)(Device, char*, unsigned int);  // name, UUID

#if defined(LUMEN_HAVE_NVML_H)
static_assert(std::is_same_v<InitFn, decltype(&nvmlInit_v2)>);
static_assert(std::is_same_v<ShutdownFn, decltype(&nvmlShutdown)>);
static_assert(std::is_same_v<ErrorStringFn, decltype(&nvmlErrorString)>);
static_assert(std::is_same_v<DeviceGetCountFn, decltype(&nvmlDeviceGetCount_v2)>);
static_assert(std::is_same_v<DeviceGetHandleByIndexFn, decltype(&nvmlDeviceGetHandleByIndex_v2)>);
static_assert(std::is_same_v<DeviceGetUtilizationRatesFn, decltype(&nvmlDeviceGetUtilizationRates)>);
static_assert(std::is_same_v<DeviceGetMemoryInfoFn, decltype(&nvmlDeviceGetMemoryInfo)>);
static_assert(std::is_same_v<DeviceGetStringFn, decltype(&nvmlDeviceGetName)>);
static_assert(std::is_same_v<DeviceGetStringFn, decltype(&nvmlDeviceGetUUID)>);
static_assert(NVML_SUCCESS == kSuccess && NVML_ERROR_NOT_SUPPORTED == kNotSupported);
#endif

}  // namespace lumen::node::nvml
