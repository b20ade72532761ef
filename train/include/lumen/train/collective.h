// lumen::collective: groups of tasks and actors that all-reduce, broadcast and
// gather buffers through Gloo (CPU, TCP) — Ray's ray.util.collective in C++.
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
  // Before each collective operation, check (one 64-byte all-reduce) that
  // every rank called it with the same element count, type and parameters;
  // a mismatch is then a CollectiveError on every rank. Off saves that round
  // trip, but Gloo aborts a process that receives more bytes than it expects.
  // Send/Recv always check (an 8-byte header).
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

// The element types every operation takes: float, double, int32_t, int64_t.
template <class T>
concept Element = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;

// How many elements of an input of `count` elements rank `rank` of `world`
// receives from ReduceScatter: count / world, plus one for the first
// count % world ranks.
size_t ReduceScatterCount(size_t count, int rank, int world);

namespace internal {
enum class DType : uint8_t { kFloat32, kFloat64, kInt32, kInt64 };
template <class T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return DType::kFloat64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kInt32;
  if constexpr (std::is_same_v<T, int64_t>) return DType::kInt64;
}
// A typed view of a caller's buffer.
struct Buffer {
  void* data;
  size_t count;
  DType dtype;
};
template <class T>
Buffer View(std::span<T> s) {
  return Buffer{const_cast<std::remove_const_t<T>*>(s.data()), s.size(),
                DTypeOf<std::remove_const_t<T>>()};
}
class Pending;
std::shared_ptr<Pending> AllReduceAsync(Buffer data, ReduceOp op, const std::string& group);
void Wait(const std::shared_ptr<Pending>& pending);
bool Ready(const std::shared_ptr<Pending>& pending);
void AllReduce(Buffer data, ReduceOp op, const std::string& group);
void Broadcast(Buffer data, int root, const std::string& group);
void AllGather(Buffer input, Buffer output, const std::string& group);
void ReduceScatter(Buffer input, Buffer output, ReduceOp op, const std::string& group);
void Reduce(Buffer data, int root, ReduceOp op, const std::string& group);
void Send(Buffer data, int dst, const std::string& group);
void Recv(Buffer data, int src, const std::string& group);
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

// Reduces `data` element-wise over all ranks; every rank ends with the result.
// kAverage divides the sum by the world size (integer division for integers).
template <Element T>
void AllReduce(std::span<T> data, ReduceOp op = ReduceOp::kSum,
               const std::string& group = "default") {
  internal::AllReduce(internal::View(data), op, group);
}
template <Element T>
CollectiveFuture AllReduceAsync(std::span<T> data, ReduceOp op = ReduceOp::kSum,
                                const std::string& group = "default") {
  return CollectiveFuture(internal::AllReduceAsync(internal::View(data), op, group));
}
// Copies root's `data` into every other rank's `data` (same size everywhere).
template <Element T>
void Broadcast(std::span<T> data, int root, const std::string& group = "default") {
  internal::Broadcast(internal::View(data), root, group);
}
// `output` (world_size × input.size() elements) receives every rank's input,
// in rank order.
template <Element T>
void AllGather(std::span<const T> input, std::span<T> output,
               const std::string& group = "default") {
  internal::AllGather(internal::View(input), internal::View(output), group);
}
template <Element T>
void AllGather(std::span<T> input, std::span<T> output, const std::string& group = "default") {
  AllGather(std::span<const T>(input), output, group);
}
// Reduces `input` over all ranks and gives rank r its block: `output` holds
// ReduceScatterCount(input.size(), r, world) elements, the blocks in rank order.
template <Element T>
void ReduceScatter(std::span<const T> input, std::span<T> output, ReduceOp op = ReduceOp::kSum,
                   const std::string& group = "default") {
  internal::ReduceScatter(internal::View(input), internal::View(output), op, group);
}
template <Element T>
void ReduceScatter(std::span<T> input, std::span<T> output, ReduceOp op = ReduceOp::kSum,
                   const std::string& group = "default") {
  ReduceScatter(std::span<const T>(input), output, op, group);
}
// Reduces `data` over all ranks into root's `data`; other ranks' data is left
// unspecified.
template <Element T>
void Reduce(std::span<T> data, int root, ReduceOp op = ReduceOp::kSum,
            const std::string& group = "default") {
  internal::Reduce(internal::View(data), root, op, group);
}
// Point to point: the receiver's size must equal the sender's.
template <Element T>
void Send(std::span<const T> data, int dst, const std::string& group = "default") {
  internal::Send(internal::View(data), dst, group);
}
template <Element T>
void Send(std::span<T> data, int dst, const std::string& group = "default") {
  internal::Send(internal::View(data), dst, group);
}
template <Element T>
void Recv(std::span<T> data, int src, const std::string& group = "default") {
  internal::Recv(internal::View(data), src, group);
}
// Returns once every member of the group has entered the barrier.
void Barrier(const std::string& group = "default");

}  // namespace lumen::collective
