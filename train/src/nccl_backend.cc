#include "nccl_backend.h"

#include <cuda_runtime.h>
#if __has_include(<cuda_bf16.h>)
#include <cuda_bf16.h>  // before nccl.h: older NCCLs declare ncclBfloat16 only with it
#endif
#include <nccl.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace lumen::collective::internal {

// One group's communicator. Used by one thread at a time (the group
// serialises its operations); created and destroyed with the group.
class NcclComm {
 public:
  ncclComm_t comm = nullptr;
  int device = 0;            // CUDA device ordinal of this process's GPU
  cudaEvent_t done = nullptr;  // recorded after each operation, to wait for it alone
  void* scratch = nullptr;   // device memory for barrier and uneven reduce-scatter
  size_t scratch_bytes = 0;
  int rank = 0;
  int size = 0;
  std::chrono::milliseconds timeout{30000};
  bool aborted = false;  // after ncclCommAbort the handle is gone
};

namespace {

using Clock = std::chrono::steady_clock;

void CheckCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": CUDA error " + cudaGetErrorString(e));
  }
}

void Abort(NcclComm& c) {
  if (c.comm != nullptr && !c.aborted) {
    ncclResult_t r = ncclCommAbort(c.comm);
    if (r != ncclSuccess) {
      // Nothing more to do: the communicator is unusable either way.
    }
    c.aborted = true;
  }
}

// Throws (after aborting the communicator) unless `r` is success or "in progress".
void CheckNccl(NcclComm* c, ncclResult_t r, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  std::string why = std::string(what) + ": NCCL error " + ncclGetErrorString(r);
  if (c != nullptr) {
    const char* last = ncclGetLastError(c->comm);
    if (last != nullptr && *last != '\0') why += std::string(" (") + last + ")";
    Abort(*c);
  }
  throw std::runtime_error(why);
}

[[noreturn]] void TimedOut(NcclComm& c, const char* what) {
  Abort(c);
  throw std::runtime_error(std::string(what) + ": no answer from a member within " +
                           std::to_string(c.timeout.count()) +
                           " ms; the NCCL communicator was aborted");
}

// A non-blocking communicator may answer ncclInProgress while it enqueues the
// operation in the background; nothing else may be called on it, nor queued
// on its stream, until its state leaves ncclInProgress (NCCL's documented
// rule). Waits for that, never past `deadline`.
void WaitEnqueued(NcclComm& c, ncclResult_t called, const char* what, Clock::time_point deadline) {
  CheckNccl(&c, called, what);
  if (called == ncclSuccess) return;
  while (true) {
    ncclResult_t state = ncclSuccess;
    CheckNccl(&c, ncclCommGetAsyncError(c.comm, &state), what);
    if (state == ncclSuccess) return;
    CheckNccl(&c, state, what);
    if (Clock::now() >= deadline) TimedOut(c, what);
    std::this_thread::yield();
  }
}

// Waits until the work queued on `stream` up to now finished, never longer
// than the group's timeout: a peer that died leaves NCCL's kernels spinning,
// so the communicator is aborted then, as on an asynchronous NCCL error.
void Finish(NcclComm& c, cudaStream_t stream, const char* what, Clock::time_point deadline) {
  CheckCuda(cudaEventRecord(c.done, stream), "cudaEventRecord");
  while (true) {
    cudaError_t e = cudaEventQuery(c.done);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) CheckCuda(e, what);
    ncclResult_t async = ncclSuccess;
    CheckNccl(&c, ncclCommGetAsyncError(c.comm, &async), what);
    CheckNccl(&c, async, what);
    if (Clock::now() >= deadline) TimedOut(c, what);
    std::this_thread::yield();
  }
}

ncclDataType_t NcclType(DType t) {
  switch (t) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
  }
  return ncclFloat32;
}

size_t Bytes(DType t) {
  switch (t) {
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kFloat64:
    case DType::kInt64: return 8;
  }
  return 8;
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kProduct: return ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kAverage: return ncclAvg;
  }
  return ncclSum;
}

cudaStream_t Stream(CudaStream s) { return reinterpret_cast<cudaStream_t>(s.handle); }

// Makes the group's device current on this thread (operations may run on the
// caller's thread or the group's executor) and restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(const NcclComm& c) {
    CheckCuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != c.device) CheckCuda(cudaSetDevice(c.device), "cudaSetDevice");
  }
  ~DeviceScope() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) {
      cudaError_t e = cudaSetDevice(previous_);
      if (e != cudaSuccess) {
        // The operation's own error (if any) is the one reported.
      }
    }
  }

 private:
  int previous_ = 0;
};

// Device scratch of at least `bytes`; freed with the communicator. cudaFree
// and cudaMalloc synchronise the device, so this runs before queuing work.
void* Scratch(NcclComm& c, size_t bytes) {
  if (bytes > c.scratch_bytes) {
    if (c.scratch) CheckCuda(cudaFree(c.scratch), "cudaFree");
    c.scratch = nullptr;
    c.scratch_bytes = 0;
    CheckCuda(cudaMalloc(&c.scratch, bytes), "cudaMalloc");
    c.scratch_bytes = bytes;
  }
  return c.scratch;
}

}  // namespace

void NcclCommDeleter::operator()(NcclComm* c) const {
  if (c == nullptr) return;
  if (c->comm != nullptr && !c->aborted) {
    // Finalize (flushes outstanding work; non-blocking: poll), then destroy;
    // a member that never answers makes it an abort instead of a hang.
    auto deadline = Clock::now() + c->timeout;
    ncclResult_t r = ncclCommFinalize(c->comm);
    ncclResult_t state = r;
    while (state == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::yield();
      if (ncclCommGetAsyncError(c->comm, &state) != ncclSuccess) state = ncclInternalError;
    }
    if (state == ncclSuccess) {
      r = ncclCommDestroy(c->comm);
      if (r != ncclSuccess) Abort(*c);
    } else {
      Abort(*c);
    }
  }
  if (c->scratch) cudaFree(c->scratch);
  if (c->done) cudaEventDestroy(c->done);
  delete c;
}

bool NcclDeviceAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

NcclCommPtr NcclConnect(const GroupOptions& options, KvRendezvousStore& store) {
  if (!NcclDeviceAvailable()) throw std::runtime_error("no CUDA device is visible to this process");
  NcclCommPtr c(new NcclComm());
  c->rank = options.rank;
  c->size = options.world_size;
  c->timeout = options.timeout;
  // The process sees exactly its GPUs (CUDA_VISIBLE_DEVICES): use the first.
  c->device = 0;
  DeviceScope device(*c);
  CheckCuda(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming), "cudaEventCreate");
  ncclUniqueId id;
  if (options.rank == 0) {
    CheckNccl(nullptr, ncclGetUniqueId(&id), "ncclGetUniqueId");
    store.set("nccl_id", std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    std::vector<char> bytes = store.get("nccl_id");
    if (bytes.size() != sizeof(id.internal)) throw std::runtime_error("malformed ncclUniqueId");
    std::copy(bytes.begin(), bytes.end(), id.internal);
  }
  // Non-blocking, so that a member that never comes cannot block us past the
  // timeout: every call may then answer ncclInProgress (WaitEnqueued).
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  auto deadline = Clock::now() + options.timeout;
  WaitEnqueued(*c,
               ncclCommInitRankConfig(&c->comm, options.world_size, id, options.rank, &config),
               "ncclCommInitRankConfig", deadline);
  return c;
}

namespace {
// Runs one NCCL call (`call` returns its ncclResult_t) on `stream` and waits
// for it there.
template <class Call>
void Run(NcclComm& c, CudaStream stream, const char* what, Call&& call) {
  DeviceScope device(c);
  auto deadline = Clock::now() + c.timeout;
  WaitEnqueued(c, call(Stream(stream)), what, deadline);
  Finish(c, Stream(stream), what, deadline);
}
}  // namespace

void NcclAllReduce(NcclComm& c, Buffer d, ReduceOp op, CudaStream stream) {
  if (d.count == 0) return;
  Run(c, stream, "ncclAllReduce", [&](cudaStream_t s) {
    return ncclAllReduce(d.data, d.data, d.count, NcclType(d.dtype), NcclOp(op), c.comm, s);
  });
}

void NcclBroadcast(NcclComm& c, Buffer d, int root, CudaStream stream) {
  if (d.count == 0) return;
  Run(c, stream, "ncclBroadcast", [&](cudaStream_t s) {
    return ncclBroadcast(d.data, d.data, d.count, NcclType(d.dtype), root, c.comm, s);
  });
}

void NcclAllGather(NcclComm& c, Buffer in, Buffer out, CudaStream stream) {
  if (in.count == 0) return;
  Run(c, stream, "ncclAllGather", [&](cudaStream_t s) {
    return ncclAllGather(in.data, out.data, in.count, NcclType(in.dtype), c.comm, s);
  });
}

void NcclReduceScatter(NcclComm& c, Buffer in, Buffer out, ReduceOp op, CudaStream stream) {
  if (in.count == 0) return;
  if (in.count % c.size == 0) {
    Run(c, stream, "ncclReduceScatter", [&](cudaStream_t s) {
      return ncclReduceScatter(in.data, out.data, in.count / c.size, NcclType(in.dtype),
                               NcclOp(op), c.comm, s);
    });
    return;
  }
  // Uneven blocks: NCCL's reduce-scatter gives every rank the same count, so
  // all-reduce a device copy and take this rank's block.
  size_t es = Bytes(in.dtype);
  DeviceScope device(c);
  void* tmp = Scratch(c, in.count * es);
  cudaStream_t s = Stream(stream);
  auto deadline = Clock::now() + c.timeout;
  CheckCuda(cudaMemcpyAsync(tmp, in.data, in.count * es, cudaMemcpyDeviceToDevice, s),
            "cudaMemcpyAsync");
  WaitEnqueued(c, ncclAllReduce(tmp, tmp, in.count, NcclType(in.dtype), NcclOp(op), c.comm, s),
               "ncclAllReduce", deadline);
  size_t base = in.count / c.size, extra = in.count % c.size;
  size_t offset = base * c.rank + std::min<size_t>(c.rank, extra);
  CheckCuda(cudaMemcpyAsync(out.data, static_cast<char*>(tmp) + offset * es, out.count * es,
                            cudaMemcpyDeviceToDevice, s),
            "cudaMemcpyAsync");
  Finish(c, s, "ncclReduceScatter", deadline);
}

void NcclReduce(NcclComm& c, Buffer d, int root, ReduceOp op, CudaStream stream) {
  if (d.count == 0) return;
  Run(c, stream, "ncclReduce", [&](cudaStream_t s) {
    return ncclReduce(d.data, d.data, d.count, NcclType(d.dtype), NcclOp(op), root, c.comm, s);
  });
}

void NcclSend(NcclComm& c, Buffer d, int peer, CudaStream stream) {
  Run(c, stream, "ncclSend", [&](cudaStream_t s) {
    return ncclSend(d.data, d.count, NcclType(d.dtype), peer, c.comm, s);
  });
}

void NcclRecv(NcclComm& c, Buffer d, int peer, CudaStream stream) {
  Run(c, stream, "ncclRecv", [&](cudaStream_t s) {
    return ncclRecv(d.data, d.count, NcclType(d.dtype), peer, c.comm, s);
  });
}

void NcclBarrier(NcclComm& c, CudaStream stream) {
  DeviceScope device(c);
  void* one = Scratch(c, sizeof(int32_t));
  Run(c, stream, "barrier", [&](cudaStream_t s) {
    return ncclAllReduce(one, one, 1, ncclInt32, ncclSum, c.comm, s);
  });
}

}  // namespace lumen::collective::internal
