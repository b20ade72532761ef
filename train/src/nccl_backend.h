// The NCCL backend of lumen::collective: one ncclComm_t per group on the
// device CUDA_VISIBLE_DEVICES gives the process (its device 0), its unique id
// exchanged through the head's key-value store. Compiled only when CMake found
// the CUDA Toolkit and NCCL (LUMEN_WITH_NCCL). Buffers are device pointers.
//
// Every call waits for its operation on the group's stream, polling
// cudaStreamQuery and ncclCommGetAsyncError; past the group's timeout the
// communicator is aborted (ncclCommAbort) instead of left blocked, and the
// call throws std::runtime_error (collective.cc turns it into CollectiveError
// and marks the group broken). Not thread-safe: the group serialises calls.
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

void NcclAllReduce(NcclComm& comm, Buffer data, ReduceOp op);
void NcclBroadcast(NcclComm& comm, Buffer data, int root);
void NcclAllGather(NcclComm& comm, Buffer input, Buffer output);
void NcclReduceScatter(NcclComm& comm, Buffer input, Buffer output, ReduceOp op);
void NcclReduce(NcclComm& comm, Buffer data, int root, ReduceOp op);
void NcclSend(NcclComm& comm, Buffer data, int peer);
void NcclRecv(NcclComm& comm, Buffer data, int peer);
void NcclBarrier(NcclComm& comm);

}  // namespace lumen::collective::internal
