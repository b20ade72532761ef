#include "nccl_backend.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace lumen::collective::internal {

class NcclComm {
 public:
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  void* scratch = nullptr;  // device memory for barrier and uneven reduce-scatter
  size_t scratch_bytes = 0;
  int rank = 0;
  int size = 0;
  std::chrono::milliseconds timeout{30000};
  bool aborted = false;
};

namespace {

void CheckCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": CUDA error " + cudaGetErrorString(e));
  }
}

void CheckNccl(NcclComm* c, ncclResult_t r, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  std::string why = std::string(what) + ": NCCL error " + ncclGetErrorString(r);
  if (c != nullptr && c->comm != nullptr && !c->aborted) {
    ncclCommAbort(c->comm);
    c->aborted = true;
  }
  throw std::runtime_error(why);
}

// Waits for the group's stream, never longer than its timeout: a peer that
// died leaves NCCL's kernels spinning, so the communicator is aborted.
void Finish(NcclComm& c, const char* what) {
  auto deadline = std::chrono::steady_clock::now() + c.timeout;
  while (true) {
    cudaError_t e = cudaStreamQuery(c.stream);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) CheckCuda(e, what);
    ncclResult_t async = ncclSuccess;
    CheckNccl(&c, ncclCommGetAsyncError(c.comm, &async), what);
    CheckNccl(&c, async, what);
    if (std::chrono::steady_clock::now() >= deadline) {
      ncclCommAbort(c.comm);
      c.aborted = true;
      throw std::runtime_error(std::string(what) + ": no answer from a member within " +
                               std::to_string(c.timeout.count()) +
                               " ms; the NCCL communicator was aborted");
    }
    std::this_thread::yield();
  }
}

ncclDataType_t NcclType(DType t) {
  switch (t) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
  }
  return ncclFloat32;
}

size_t Bytes(DType t) { return t == DType::kFloat32 || t == DType::kInt32 ? 4 : 8; }

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

void* Scratch(NcclComm& c, size_t bytes) {
  if (bytes > c.scratch_bytes) {
    if (c.scratch) cudaFree(c.scratch);
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
  if (c->comm) {
    if (c->aborted) {
      // Already torn down by ncclCommAbort.
    } else {
      ncclCommDestroy(c->comm);
    }
  }
  if (c->scratch) cudaFree(c->scratch);
  if (c->stream) cudaStreamDestroy(c->stream);
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
  CheckCuda(cudaSetDevice(0), "cudaSetDevice");
  CheckCuda(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  ncclUniqueId id;
  if (options.rank == 0) {
    CheckNccl(nullptr, ncclGetUniqueId(&id), "ncclGetUniqueId");
    store.set("nccl_id", std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    std::vector<char> bytes = store.get("nccl_id");
    if (bytes.size() != sizeof(id.internal)) throw std::runtime_error("malformed ncclUniqueId");
    std::copy(bytes.begin(), bytes.end(), id.internal);
  }
  // Non-blocking init, so that a member that never comes cannot block us
  // past the timeout.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  CheckNccl(c.get(), ncclCommInitRankConfig(&c->comm, options.world_size, id, options.rank, &config),
            "ncclCommInitRankConfig");
  auto deadline = std::chrono::steady_clock::now() + options.timeout;
  while (true) {
    ncclResult_t state = ncclSuccess;
    CheckNccl(c.get(), ncclCommGetAsyncError(c->comm, &state), "ncclCommGetAsyncError");
    if (state == ncclSuccess) break;
    if (state != ncclInProgress) CheckNccl(c.get(), state, "ncclCommInitRankConfig");
    if (std::chrono::steady_clock::now() >= deadline) {
      ncclCommAbort(c->comm);
      c->aborted = true;
      throw std::runtime_error("NCCL communicator setup timed out after " +
                               std::to_string(options.timeout.count()) + " ms");
    }
    std::this_thread::yield();
  }
  return c;
}

// With a non-blocking communicator each call may return ncclInProgress; the
// work is then on the stream and Finish waits for it.
void NcclAllReduce(NcclComm& c, Buffer d, ReduceOp op) {
  if (d.count == 0) return;
  CheckNccl(&c, ncclAllReduce(d.data, d.data, d.count, NcclType(d.dtype), NcclOp(op), c.comm, c.stream),
            "ncclAllReduce");
  Finish(c, "ncclAllReduce");
}

void NcclBroadcast(NcclComm& c, Buffer d, int root) {
  if (d.count == 0) return;
  CheckNccl(&c, ncclBroadcast(d.data, d.data, d.count, NcclType(d.dtype), root, c.comm, c.stream),
            "ncclBroadcast");
  Finish(c, "ncclBroadcast");
}

void NcclAllGather(NcclComm& c, Buffer in, Buffer out) {
  if (in.count == 0) return;
  CheckNccl(&c, ncclAllGather(in.data, out.data, in.count, NcclType(in.dtype), c.comm, c.stream),
            "ncclAllGather");
  Finish(c, "ncclAllGather");
}

void NcclReduceScatter(NcclComm& c, Buffer in, Buffer out, ReduceOp op) {
  if (in.count == 0) return;
  size_t es = Bytes(in.dtype);
  if (in.count % c.size == 0) {
    CheckNccl(&c, ncclReduceScatter(in.data, out.data, in.count / c.size, NcclType(in.dtype),
                                    NcclOp(op), c.comm, c.stream),
              "ncclReduceScatter");
    Finish(c, "ncclReduceScatter");
    return;
  }
  // Uneven blocks: all-reduce a copy, then take this rank's block.
  void* tmp = Scratch(c, in.count * es);
  CheckCuda(cudaMemcpyAsync(tmp, in.data, in.count * es, cudaMemcpyDeviceToDevice, c.stream),
            "cudaMemcpyAsync");
  CheckNccl(&c, ncclAllReduce(tmp, tmp, in.count, NcclType(in.dtype), NcclOp(op), c.comm, c.stream),
            "ncclAllReduce");
  size_t base = in.count / c.size, extra = in.count % c.size;
  size_t offset = base * c.rank + std::min<size_t>(c.rank, extra);
  CheckCuda(cudaMemcpyAsync(out.data, static_cast<char*>(tmp) + offset * es, out.count * es,
                            cudaMemcpyDeviceToDevice, c.stream),
            "cudaMemcpyAsync");
  Finish(c, "ncclReduceScatter");
}

void NcclReduce(NcclComm& c, Buffer d, int root, ReduceOp op) {
  if (d.count == 0) return;
  CheckNccl(&c, ncclReduce(d.data, d.data, d.count, NcclType(d.dtype), NcclOp(op), root, c.comm,
                           c.stream),
            "ncclReduce");
  Finish(c, "ncclReduce");
}

void NcclSend(NcclComm& c, Buffer d, int peer) {
  CheckNccl(&c, ncclSend(d.data, d.count, NcclType(d.dtype), peer, c.comm, c.stream), "ncclSend");
  Finish(c, "ncclSend");
}

void NcclRecv(NcclComm& c, Buffer d, int peer) {
  CheckNccl(&c, ncclRecv(d.data, d.count, NcclType(d.dtype), peer, c.comm, c.stream), "ncclRecv");
  Finish(c, "ncclRecv");
}

void NcclBarrier(NcclComm& c) {
  void* one = Scratch(c, sizeof(int32_t));
  CheckNccl(&c, ncclAllReduce(one, one, 1, ncclInt32, ncclSum, c.comm, c.stream), "ncclAllReduce");
  Finish(c, "barrier");
}

}  // namespace lumen::collective::internal
