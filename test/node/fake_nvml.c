/* libfake-nvml.so: the few NVML entry points GpuMonitor resolves
 * (core/node/nvml_api.h), answering for two fixed devices, so that tests
 * check GPU metrics on machines without an NVIDIA driver
 * (LUMEN_NVML_LIBRARY=/path/to/libfake-nvml.so).
 *
 *   device 0: "Fake GPU A", GPU-fa4e0000-..., 37 % busy,  3 GiB of 80 GiB used
 *   device 1: "Fake GPU B", GPU-fa4e0001-..., 91 % busy, 70 GiB of 80 GiB used
 *
 * Device handles are 1 and 2 cast to pointers. Same C ABI as NVML's. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;
typedef struct {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

#define FAKE_SUCCESS 0
#define FAKE_UNINITIALIZED 1
#define FAKE_INVALID_ARGUMENT 2
#define FAKE_INSUFFICIENT_SIZE 7

static const unsigned long long kGiB = 1ull << 30;
static int initialised = 0;

static int DeviceIndex(nvmlDevice_t device) {
  uintptr_t handle = (uintptr_t)device;
  return handle == 1 || handle == 2 ? (int)handle - 1 : -1;
}

static int CopyString(const char* text, char* out, unsigned int length) {
  if (out == NULL) return FAKE_INVALID_ARGUMENT;
  if (strlen(text) + 1 > length) return FAKE_INSUFFICIENT_SIZE;
  memcpy(out, text, strlen(text) + 1);
  return FAKE_SUCCESS;
}

int nvmlInit_v2(void) {
  initialised = 1;
  return FAKE_SUCCESS;
}

int nvmlShutdown(void) {
  if (!initialised) return FAKE_UNINITIALIZED;
  initialised = 0;
  return FAKE_SUCCESS;
}

const char* nvmlErrorString(int result) { return result == FAKE_SUCCESS ? "Success" : "fake NVML error"; }

int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!initialised) return FAKE_UNINITIALIZED;
  if (count == NULL) return FAKE_INVALID_ARGUMENT;
  *count = 2;
  return FAKE_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (!initialised) return FAKE_UNINITIALIZED;
  if (index >= 2 || device == NULL) return FAKE_INVALID_ARGUMENT;
  *device = (nvmlDevice_t)(uintptr_t)(index + 1);
  return FAKE_SUCCESS;
}

int nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  int i = DeviceIndex(device);
  if (i < 0 || utilization == NULL) return FAKE_INVALID_ARGUMENT;
  utilization->gpu = i == 0 ? 37 : 91;
  utilization->memory = i == 0 ? 5 : 60;
  return FAKE_SUCCESS;
}

int nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  int i = DeviceIndex(device);
  if (i < 0 || memory == NULL) return FAKE_INVALID_ARGUMENT;
  memory->total = 80 * kGiB;
  memory->used = (i == 0 ? 3 : 70) * kGiB;
  memory->free = memory->total - memory->used;
  return FAKE_SUCCESS;
}

int nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  int i = DeviceIndex(device);
  if (i < 0) return FAKE_INVALID_ARGUMENT;
  return CopyString(i == 0 ? "Fake GPU A" : "Fake GPU B", name, length);
}

int nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  int i = DeviceIndex(device);
  if (i < 0) return FAKE_INVALID_ARGUMENT;
  char text[64];
  snprintf(text, sizeof(text), "GPU-fa4e000%d-1111-2222-3333-444455556666", i);
  return CopyString(text, uuid, length);
}
