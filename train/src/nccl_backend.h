// The NCCL backend of lumen::collective: one ncclComm_t per group on the
// device CUDA_VISIBLE_DEVICES gives the process (its device 0), its unique id
// exchanged through the head's key-value store. Compiled only when CMake found
// the CUDA Toolkit and NCCL (LUMEN_WITH_NCCL). Buffers are device pointers.
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0). Every call
// queues its operation on the caller's CUDA stream (CudaStream; by default the
// current one), waits until NCCL has enqueued it (ncclInProgress), then polls
// an event recorded after it and ncclCommGetAsyncError; past the group's
// timeout, or on an NCCL error, the communicator is aborted (ncclCommAbort)
// instead of left blocked, and the call throws std::runtime_error
// (collective.cc turns it into CollectiveError and marks the group broken).
// Destroying a communicator finalizes it within the timeout, else aborts it.
// Elements: float32, float64, int32, int64, float16, bfloat16 (NCCL >= 2.14).
// Runs on whichever thread the group runs an operation on (caller or
// executor), one at a time: the group serialises calls; the device is made
// current for each call.
#pragma once

#include <chrono>
#include <memory>

#include "kv_rendezvous_store.h"
#include "lumen/train/collective.h"

namespace lumen::collective::internal {

class NcclComm;
struct NcclCommDeleter {
  void operator()(NcclComm* comm) const;
};
using NcclCommPtr = std::unique_ptr<NcclComm, NcclCommDeleter>;

// Whether this process sees a CUDA device.
bool NcclDeviceAvailable();

// Rank 0 creates the unique id and puts it under the store's prefix; the
// others wait for it. Throws on any CUDA or NCCL error, or at the timeout.
NcclCommPtr NcclConnect(const GroupOptions& options, KvRendezvousStore& store);

// Each queues the operation on `stream` (after the work already queued there)
// and returns when it finished there.
void NcclAllReduce(NcclComm& comm, Buffer data, ReduceOp op, CudaStream stream);
void NcclBroadcast(NcclComm& comm, Buffer data, int root, CudaStream stream);
void NcclAllGather(NcclComm& comm, Buffer input, Buffer output, CudaStream stream);
void NcclReduceScatter(NcclComm& comm, Buffer input, Buffer output, ReduceOp op,
                       CudaStream stream);
void NcclReduce(NcclComm& comm, Buffer data, int root, ReduceOp op, CudaStream stream);
void NcclSend(NcclComm& comm, Buffer data, int peer, CudaStream stream);
void NcclRecv(NcclComm& comm, Buffer data, int peer, CudaStream stream);
void NcclBarrier(NcclComm& comm, CudaStream stream);

}  // namespace lumen::collective::internal
