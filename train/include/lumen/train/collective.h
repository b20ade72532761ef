// lumen::collective: groups of tasks and actors that all-reduce, broadcast and
// gather buffers through Gloo (CPU buffers, TCP) or NCCL (GPU buffers) — Ray's
// ray.util.collective in C++.
//
//   class Worker {
//    public:
//     static Worker* Create(int rank, int world) {
//       lumen::collective::InitGroup({.world_size = world, .rank = rank,
//                                     .backend = lumen::collective::Backend::kGloo,
//                                     .name = "grads"});
//       return new Worker;
//     }
//     std::vector<float> Step(std::vector<float> g) {
//       lumen::collective::AllReduce(std::span<float>(g), lumen::collective::ReduceOp::kAverage,
//                                    "grads");
//       return g;  // the same on every rank
//     }
//   };
//   // or, from the driver over existing actors (ranks in list order):
//   lumen::collective::CreateGroup(actors, {.backend = Backend::kGloo, .name = "grads"});
//
// Every member calls the same operations on a group in the same order (as
// with MPI); the data moves between the members' processes directly over
// Gloo's TCP transport on their node's address. Rendezvous goes through the
// head's key-value store (lumen::kv, namespace "lumen.collective"); its keys
// are removed by DestroyGroup. See doc/collective.md.
//
// Element types: float, double, int32_t, int64_t on every backend; Half and
// BFloat16 (and CUDA's __half / __nv_bfloat16 when <cuda_fp16.h> /
// <cuda_bf16.h> are included before this header) on NCCL groups only. On NCCL
// groups every operation also takes an optional CUDA stream (see CudaStream).
//
// Errors: CollectiveError (a lumen::Error) names the group, this rank and, when
// it can tell, the rank that failed. A member that dies makes every other
// member's pending and next call on the group fail within the group's timeout;
// the group is then broken: destroy it and build a new one with the survivors.
// Thread-safe: operations on one group run one at a time, in call order.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "lumen/lumen.h"

// CUDA's stream type is `struct CUstream_st*` (cudaStream_t); declared here so
// that this header needs no CUDA headers.
struct CUstream_st;

namespace lumen::collective {

enum class Backend {
  kGloo,  // CPU buffers over TCP
  kNccl,  // GPU buffers; available when Lumen was built with CUDA and NCCL
};

enum class ReduceOp { kSum, kProduct, kMin, kMax, kAverage };

struct GroupOptions {
  int world_size = 0;
  int rank = -1;
  Backend backend = Backend::kGloo;
  std::string name = "default";
  // How long rendezvous and each operation may wait for the other members.
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  // Members of one group instance share it. Empty: derived from the name and
  // how many times this process destroyed a group of that name (so survivors
  // that destroy a broken group and init it again meet in a fresh place).
  // CreateGroup sets a fresh one.
  std::string rendezvous_id;
  // Gloo: check that every rank called each collective operation with the
  // same operation, element count, type and root/reduction, so that a
  // mismatch is a CollectiveError on every rank instead of a Gloo abort or
  // wrong data. Calls of up to kInlineBytes per rank carry the check in the
  // one Gloo exchange that also moves their data, whatever this says; larger
  // calls exchange it first (one small round trip). Off skips that round trip
  // for the larger calls; a mismatch among them then aborts the process (Gloo
  // enforces that no more bytes arrive than a receive expects) or times out.
  // Send/Recv always check (an 8-byte header). NCCL does not check.
  bool verify_sizes = true;
};

// Joins group `options.name` as `options.rank` of `options.world_size`; returns
// once every member has joined (or throws CollectiveError at the timeout). Call
// it inside a task or actor (or the driver) once per member.
void InitGroup(const GroupOptions& options);

struct CreateGroupOptions {
  Backend backend = Backend::kGloo;
  std::string name = "default";
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  bool verify_sizes = true;  // as GroupOptions::verify_sizes
};

// Leaves and forgets group `name` in this process, and removes the group's
// rendezvous keys from the head. Never throws for a broken group; a no-op for
// an unknown one.
void DestroyGroup(const std::string& name = "default");

bool IsGroupInitialized(const std::string& name = "default");
// This process's rank and the group's size; CollectiveError for an unknown group.
int GetRank(const std::string& name = "default");
int GetWorldSize(const std::string& name = "default");

// A call whose data is at most this many bytes per rank completes in one Gloo
// exchange that carries its shape check too (doc/collective.md).
inline constexpr size_t kInlineBytes = 1024;

// 16-bit floating-point elements, for NCCL groups (device memory): the bits of
// an IEEE half / a bfloat16, layout-compatible with CUDA's __half and
// __nv_bfloat16. Gloo groups reject them with CollectiveError.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// A CUDA stream for operations on NCCL groups: a cudaStream_t converts to it.
// The operation is queued on that stream after the work already queued there,
// and the call returns when it finished. The default is the current stream of
// the calling code: the legacy default stream, or the per-thread default
// stream in code compiled with `--default-stream per-thread`. Gloo groups take
// only the default.
struct CudaStream {
  CudaStream() = default;
  CudaStream(CUstream_st* stream) : handle(stream) {}  // NOLINT: implicit from cudaStream_t
  // CUDA's cudaStreamLegacy and cudaStreamPerThread handles.
  static CudaStream Legacy() { return CudaStream(reinterpret_cast<CUstream_st*>(0x1)); }
  static CudaStream PerThread() { return CudaStream(reinterpret_cast<CUstream_st*>(0x2)); }
  // Null, cudaStreamLegacy or cudaStreamPerThread.
  bool IsDefault() const {
    auto v = reinterpret_cast<uintptr_t>(handle);
    return v == 0 || v == 0x1 || v == 0x2;
  }
  CUstream_st* handle = nullptr;
};

namespace internal {
enum class DType : uint8_t { kFloat32, kFloat64, kInt32, kInt64, kFloat16, kBFloat16 };
// Which DType a C++ element type is; specialised for each type an operation takes.
template <class T>
struct ElementTraits {};
template <> struct ElementTraits<float> { static constexpr DType kType = DType::kFloat32; };
template <> struct ElementTraits<double> { static constexpr DType kType = DType::kFloat64; };
template <> struct ElementTraits<int32_t> { static constexpr DType kType = DType::kInt32; };
template <> struct ElementTraits<int64_t> { static constexpr DType kType = DType::kInt64; };
template <> struct ElementTraits<Half> { static constexpr DType kType = DType::kFloat16; };
template <> struct ElementTraits<BFloat16> { static constexpr DType kType = DType::kBFloat16; };
#if defined(__CUDA_FP16_TYPES_EXIST__)  // <cuda_fp16.h> was included first
template <> struct ElementTraits<__half> { static constexpr DType kType = DType::kFloat16; };
#endif
#if defined(__CUDA_BF16_TYPES_EXIST__)  // <cuda_bf16.h> was included first
template <> struct ElementTraits<__nv_bfloat16> { static constexpr DType kType = DType::kBFloat16; };
#endif
}  // namespace internal

// The element types the operations take: float, double, int32_t, int64_t
// (every backend), Half and BFloat16 (NCCL only; see above).
template <class T>
concept Element = requires { internal::ElementTraits<T>::kType; };

// How many elements of an input of `count` elements rank `rank` of `world`
// receives from ReduceScatter: count / world, plus one for the first
// count % world ranks.
size_t ReduceScatterCount(size_t count, int rank, int world);

namespace internal {
// A typed view of a caller's buffer.
struct Buffer {
  void* data;
  size_t count;
  DType dtype;
};
template <class T>
Buffer View(std::span<T> s) {
  return Buffer{const_cast<std::remove_const_t<T>*>(s.data()), s.size(),
                ElementTraits<std::remove_const_t<T>>::kType};
}
class Pending;
std::shared_ptr<Pending> AllReduceAsync(Buffer data, ReduceOp op, const std::string& group,
                                        CudaStream stream);
void Wait(const std::shared_ptr<Pending>& pending);
bool Ready(const std::shared_ptr<Pending>& pending);
void AllReduce(Buffer data, ReduceOp op, const std::string& group, CudaStream stream);
void Broadcast(Buffer data, int root, const std::string& group, CudaStream stream);
void AllGather(Buffer input, Buffer output, const std::string& group, CudaStream stream);
void ReduceScatter(Buffer input, Buffer output, ReduceOp op, const std::string& group,
                   CudaStream stream);
void Reduce(Buffer data, int root, ReduceOp op, const std::string& group, CudaStream stream);
void Send(Buffer data, int dst, const std::string& group, CudaStream stream);
void Recv(Buffer data, int src, const std::string& group, CudaStream stream);
// Runs InitGroup in each actor's process (any actor class) and waits for all.
void CreateGroup(const std::vector<std::shared_ptr<lumen::internal::RefHandle>>& actors,
                 const CreateGroupOptions& options);
}  // namespace internal

// An operation under way (AllReduceAsync). Wait() returns when it finished on
// this rank, or throws its CollectiveError. The buffer must stay alive and
// untouched until then. Thread-safe.
class CollectiveFuture {
 public:
  explicit CollectiveFuture(std::shared_ptr<internal::Pending> pending)
      : pending_(std::move(pending)) {}
  void Wait() { internal::Wait(pending_); }
  bool Ready() const { return internal::Ready(pending_); }

 private:
  std::shared_ptr<internal::Pending> pending_;  // shared with the group's executor
};

// Creates group `options.name` over `actors` from the driver: actor i becomes
// rank i. Returns once all joined; throws CollectiveError otherwise.
template <class C>
void CreateGroup(const std::vector<ActorHandle<C>>& actors, const CreateGroupOptions& options) {
  std::vector<std::shared_ptr<lumen::internal::RefHandle>> refs;
  for (const auto& a : actors) refs.push_back(a.handle());
  internal::CreateGroup(refs, options);
}

// The default `stream` argument below: the current stream of the calling code
// (nvcc's --default-stream per-thread defines CUDA_API_PER_THREAD_DEFAULT_STREAM).
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
#define LUMEN_COLLECTIVE_CURRENT_STREAM ::lumen::collective::CudaStream::PerThread()
#else
#define LUMEN_COLLECTIVE_CURRENT_STREAM ::lumen::collective::CudaStream()
#endif

// Reduces `data` element-wise over all ranks; every rank ends with the result.
// kAverage divides the sum by the world size (integer division for integers).
template <Element T>
void AllReduce(std::span<T> data, ReduceOp op = ReduceOp::kSum,
               const std::string& group = "default",
               CudaStream stream = LUMEN_COLLECTIVE_CURRENT_STREAM) {
  internal::AllReduce(internal::View(data), op, group, stream);
}
template <Element T>
CollectiveFuture AllReduceAsync(std::span<T> data, ReduceOp op = ReduceOp::kSum,
                                const std::string& group = "default",
                                CudaStream stream = LUMEN_COLLECTIVE_CURRENT_STREAM) {
  return CollectiveFuture(internal::AllReduceAsync(internal::View(data), op, group, stream));
}
// Copies root's `data` into every other rank's `data` (same size everywhere).
template <Element T>
void Broadcast(std::span<T> data, int root, const std::string& group = "default",
               CudaStream stream = LUMEN_COLLECTIVE_CURRENT_STREAM) {
  internal::Broadcast(internal::View(data), root, group, stream);
}
// `output` (world_size × input.size() elements) receives every rank's input,
// in rank order.
template <Element T>
void AllGather(std::span<const T> input, std::span<T> output,
               const std::string& group = "default",
               CudaStream stream = LUMEN_COLLECTIVE_CURRENT_STREAM) {
  internal::AllGather(internal::View(input), internal::View(output), group, stream);
}
template <Element T>
void AllGather(std::span<T> input, std::span<T> output, const std::string& group = "default",
               CudaStream stream = LUMEN_COLLECTIVE_CURRENT_STREAM) {
  AllGather(std::span<const T>(input), output, group, stream);
}
// Reduces `input` over all ranks and gives rank r its block: `output` holds
// ReduceScatterCount(input.size(), r, world) elements, the blocks in rank order.
template <Element T>
void ReduceScatter(std::span<const T> input, std::span<T> output, ReduceOp op = ReduceOp::kSum,
                   const std::string& group = "default",
                   CudaStream stream = LUMEN_COLLECTIVE_CURRENT_STREAM) {
  internal::ReduceScatter(internal::View(input), internal::View(output), op, group, stream);
}
template <Element T>
void ReduceScatter(std::span<T> input, std::span<T> output, ReduceOp op = ReduceOp::kSum,
                   const std::string& group = "default",
                   CudaStream stream = LUMEN_COLLECTIVE_CURRENT_STREAM) {
  ReduceScatter(std::span<const T>(input), output, op, group, stream);
}
// Reduces `data` over all ranks into root's `data`; other ranks' data is left
// unspecified.
template <Element T>
void Reduce(std::span<T> data, int root, ReduceOp op = ReduceOp::kSum,
            const std::string& group = "default",
            CudaStream stream = LUMEN_COLLECTIVE_CURRENT_STREAM) {
  internal::Reduce(internal::View(data), root, op, group, stream);
}
// Point to point: the receiver's size must equal the sender's.
template <Element T>
void Send(std::span<const T> data, int dst, const std::string& group = "default",
          CudaStream stream = LUMEN_COLLECTIVE_CURRENT_STREAM) {
  internal::Send(internal::View(data), dst, group, stream);
}
template <Element T>
void Send(std::span<T> data, int dst, const std::string& group = "default",
          CudaStream stream = LUMEN_COLLECTIVE_CURRENT_STREAM) {
  internal::Send(internal::View(data), dst, group, stream);
}
template <Element T>
void Recv(std::span<T> data, int src, const std::string& group = "default",
          CudaStream stream = LUMEN_COLLECTIVE_CURRENT_STREAM) {
  internal::Recv(internal::View(data), src, group, stream);
}
// Returns once every member of the group has entered the barrier (on NCCL
// groups: once the barrier finished on `stream`).
void Barrier(const std::string& group = "default",
             CudaStream stream = LUMEN_COLLECTIVE_CURRENT_STREAM);

}  // namespace lumen::collective
