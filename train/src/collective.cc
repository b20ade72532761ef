// lumen::collective's entry points: the registry of this process's groups,
// argument checks, and the hand-off of each operation to its group (group.h)
// and backend: Gloo (gloo_ops.h) or NCCL (nccl_backend.h).
#include "lumen/train/collective.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "element_types.h"
#include "gloo_ops.h"
#include "group.h"
#ifdef LUMEN_WITH_NCCL
#include "nccl_backend.h"
#endif

namespace lumen::collective {
namespace internal {
namespace {

// This process's groups by name. Thread-safe (mu).
struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Group>> groups;  // shared: ops hold it while running
  std::map<std::string, int> destroyed;                  // name -> times destroyed here
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

std::shared_ptr<Group> FindGroup(const std::string& name) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.groups.find(name);
  if (it == r.groups.end()) {
    throw CollectiveError("collective group '" + name +
                          "' is not initialized in this process (call InitGroup or CreateGroup)");
  }
  return it->second;
}

void CheckRank(const Group& g, int rank, const char* role) {
  if (rank < 0 || rank >= g.size()) {
    throw CollectiveError("collective group '" + g.options().name + "': " + role + " " +
                          std::to_string(rank) + " is not a rank of a group of " +
                          std::to_string(g.size()));
  }
}

void CheckSameType(const Buffer& a, const Buffer& b, const char* what) {
  if (a.dtype != b.dtype) {
    throw CollectiveError(std::string(what) + ": input is " + DTypeName(a.dtype) +
                          " but output is " + DTypeName(b.dtype));
  }
}

bool IsNccl(const Group& g) {
#ifdef LUMEN_WITH_NCCL
  return g.nccl() != nullptr;
#else
  (void)g;
  return false;
#endif
}

// What a Gloo group cannot take: 16-bit elements and CUDA streams.
void CheckBackend(const Group& g, const char* what, DType dtype, CudaStream stream) {
  if (IsNccl(g)) return;
  if (!HostType(dtype)) {
    throw CollectiveError("collective group '" + g.options().name + "': " + what + " of " +
                          DTypeName(dtype) +
                          " elements needs an NCCL group; Gloo groups take float32, float64, "
                          "int32 and int64");
  }
  if (!stream.IsDefault()) {
    throw CollectiveError("collective group '" + g.options().name + "': " + what +
                          " was given a CUDA stream, but the group is on Gloo (CPU buffers)");
  }
}

}  // namespace

// On NCCL groups, `body` does the operation there instead.
#ifdef LUMEN_WITH_NCCL
#define LUMEN_ON_NCCL(g, body) \
  if (::lumen::collective::internal::NcclComm* nccl = (g).nccl()) { body; return; }
#else
#define LUMEN_ON_NCCL(g, body)
#endif

void AllReduce(Buffer data, ReduceOp op, const std::string& group, CudaStream stream) {
  auto g = FindGroup(group);
  CheckBackend(*g, "all_reduce", data.dtype, stream);
  g->RunSync("all_reduce", [&](uint32_t tag) {
    LUMEN_ON_NCCL(*g, NcclAllReduce(*nccl, data, op, stream));
    GlooAllReduce(*g, tag, data, op);
  });
}

std::shared_ptr<Pending> AllReduceAsync(Buffer data, ReduceOp op, const std::string& group,
                                        CudaStream stream) {
  auto g = FindGroup(group);
  CheckBackend(*g, "all_reduce", data.dtype, stream);
  // The group outlives its queued operations: its destructor drains the queue.
  Group* raw = g.get();
  return g->RunAsync("all_reduce", [raw, data, op, stream](uint32_t tag) {
    LUMEN_ON_NCCL(*raw, NcclAllReduce(*nccl, data, op, stream));
    GlooAllReduce(*raw, tag, data, op);
  });
}

void Wait(const std::shared_ptr<Pending>& pending) { pending->Wait(); }
bool Ready(const std::shared_ptr<Pending>& pending) { return pending->Ready(); }

void Broadcast(Buffer data, int root, const std::string& group, CudaStream stream) {
  auto g = FindGroup(group);
  CheckRank(*g, root, "broadcast root");
  CheckBackend(*g, "broadcast", data.dtype, stream);
  g->RunSync("broadcast", [&](uint32_t tag) {
    LUMEN_ON_NCCL(*g, NcclBroadcast(*nccl, data, root, stream));
    GlooBroadcast(*g, tag, data, root);
  });
}

void AllGather(Buffer input, Buffer output, const std::string& group, CudaStream stream) {
  auto g = FindGroup(group);
  CheckSameType(input, output, "all_gather");
  CheckBackend(*g, "all_gather", input.dtype, stream);
  if (output.count != input.count * static_cast<size_t>(g->size())) {
    throw CollectiveError("collective group '" + group + "': all_gather output holds " +
                          std::to_string(output.count) + " elements, expected world size " +
                          std::to_string(g->size()) + " x " + std::to_string(input.count));
  }
  g->RunSync("all_gather", [&](uint32_t tag) {
    LUMEN_ON_NCCL(*g, NcclAllGather(*nccl, input, output, stream));
    GlooAllGather(*g, tag, input, output);
  });
}

void ReduceScatter(Buffer input, Buffer output, ReduceOp op, const std::string& group,
                   CudaStream stream) {
  auto g = FindGroup(group);
  CheckSameType(input, output, "reduce_scatter");
  CheckBackend(*g, "reduce_scatter", input.dtype, stream);
  size_t mine = ReduceScatterCount(input.count, g->rank(), g->size());
  if (output.count != mine) {
    throw CollectiveError("collective group '" + group + "': reduce_scatter output holds " +
                          std::to_string(output.count) + " elements, rank " +
                          std::to_string(g->rank()) + " receives " + std::to_string(mine) +
                          " of " + std::to_string(input.count));
  }
  g->RunSync("reduce_scatter", [&](uint32_t tag) {
    LUMEN_ON_NCCL(*g, NcclReduceScatter(*nccl, input, output, op, stream));
    GlooReduceScatter(*g, tag, input, output, op);
  });
}

void Reduce(Buffer data, int root, ReduceOp op, const std::string& group, CudaStream stream) {
  auto g = FindGroup(group);
  CheckRank(*g, root, "reduce root");
  CheckBackend(*g, "reduce", data.dtype, stream);
  g->RunSync("reduce", [&](uint32_t tag) {
    LUMEN_ON_NCCL(*g, NcclReduce(*nccl, data, root, op, stream));
    GlooReduce(*g, tag, data, root, op);
  });
}

void Send(Buffer data, int dst, const std::string& group, CudaStream stream) {
  auto g = FindGroup(group);
  CheckRank(*g, dst, "send destination");
  CheckBackend(*g, "send", data.dtype, stream);
  if (dst == g->rank()) throw CollectiveError("collective group '" + group + "': send to self");
  uint64_t seq = g->NextSendSeq(dst);
  g->RunSync("send", [&](uint32_t) {
    LUMEN_ON_NCCL(*g, NcclSend(*nccl, data, dst, stream));
    GlooSend(*g, data, dst, seq);
  });
}

void Recv(Buffer data, int src, const std::string& group, CudaStream stream) {
  auto g = FindGroup(group);
  CheckRank(*g, src, "receive source");
  CheckBackend(*g, "recv", data.dtype, stream);
  if (src == g->rank()) throw CollectiveError("collective group '" + group + "': receive from self");
  uint64_t seq = g->NextRecvSeq(src);
  g->RunSync("recv", [&](uint32_t) {
    LUMEN_ON_NCCL(*g, NcclRecv(*nccl, data, src, stream));
    GlooRecv(*g, data, src, seq);
  });
}

}  // namespace internal

size_t ReduceScatterCount(size_t count, int rank, int world) {
  if (world <= 0 || rank < 0 || rank >= world) return 0;
  return count / world + (static_cast<size_t>(rank) < count % world ? 1 : 0);
}

void InitGroup(const GroupOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    throw CollectiveError("InitGroup: rank " + std::to_string(options.rank) +
                          " is not in a group of " + std::to_string(options.world_size));
  }
  if (options.name.empty() || options.name.find('/') != std::string::npos) {
    throw CollectiveError("InitGroup: a group name is non-empty and has no '/'");
  }
#ifndef LUMEN_WITH_NCCL
  if (options.backend == Backend::kNccl) {
    throw CollectiveError(
        "InitGroup: the NCCL backend is not available in this build (Lumen was built without "
        "CUDA and NCCL); use Backend::kGloo");
  }
#endif
  auto& registry = internal::GetRegistry();
  std::string prefix;
  {
    std::lock_guard<std::mutex> lock(registry.mu);
    if (registry.groups.contains(options.name)) {
      throw CollectiveError("InitGroup: collective group '" + options.name +
                            "' already exists in this process; DestroyGroup it first");
    }
    std::string id = options.rendezvous_id.empty()
                         ? "g" + std::to_string(registry.destroyed[options.name])
                         : options.rendezvous_id;
    prefix = options.name + "/" + id + "/";
  }
  auto group = std::make_shared<internal::Group>(options, prefix);
  group->Connect();
  std::lock_guard<std::mutex> lock(registry.mu);
  if (!registry.groups.emplace(options.name, group).second) {
    throw CollectiveError("InitGroup: collective group '" + options.name +
                          "' was created meanwhile by another thread");
  }
}

void DestroyGroup(const std::string& name) {
  auto& registry = internal::GetRegistry();
  std::shared_ptr<internal::Group> group;
  {
    std::lock_guard<std::mutex> lock(registry.mu);
    auto it = registry.groups.find(name);
    if (it == registry.groups.end()) return;
    group = std::move(it->second);
    registry.groups.erase(it);
    ++registry.destroyed[name];
  }
  try {
    group->store().RemoveAll();
  } catch (const lumen::Error&) {
    // The head is gone too: nothing left to clean.
  }
}

bool IsGroupInitialized(const std::string& name) {
  auto& registry = internal::GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  return registry.groups.contains(name);
}

int GetRank(const std::string& name) { return internal::FindGroup(name)->rank(); }
int GetWorldSize(const std::string& name) { return internal::FindGroup(name)->size(); }

void Barrier(const std::string& group, CudaStream stream) {
  auto g = internal::FindGroup(group);
  internal::CheckBackend(*g, "barrier", internal::DType::kFloat32, stream);
  g->RunSync("barrier", [&](uint32_t tag) {
    LUMEN_ON_NCCL(*g, internal::NcclBarrier(*nccl, stream));
    internal::GlooBarrier(*g, tag);
  });
}

}  // namespace lumen::collective
