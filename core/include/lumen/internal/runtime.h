// The non-template runtime entry points behind lumen.h's templates.
// Internal: user code includes <lumen/lumen.h> instead.
#pragma once

#include <chrono>
#include <cstring>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "lumen/common/ids.h"
#include "lumen/config.h"

namespace lumen {

// Values whose encoding is at most this many bytes travel inline in messages and
// live in their owner's memory; larger ones go to the node's shared-memory store.
inline constexpr uint64_t kInlineObjectLimit = 100 * 1024;

}  // namespace lumen

namespace lumen::runtime {
struct ObjectEntry;  // core/worker/object_table.h
}  // namespace lumen::runtime

namespace lumen::internal {

// One registration of an object in this process's reference table. Every copy
// of an ObjectRef shares one handle (hence shared ownership); the last copy going
// away drops the reference, which frees the object when it was the last anywhere.
// Immutable after construction; thread-safe.
class RefHandle {
 public:
  // `decoded`: the reference arrived inside a value (this process becomes a
  // borrower and tells the owner, or takes over the owner's in-transit pin).
  RefHandle(ObjectId id, std::string owner_address, bool decoded = false);
  // The same, sharing the owner's address string: an owner's own handles all
  // point at one copy instead of carrying one each (~100 bytes per handle).
  RefHandle(ObjectId id, std::shared_ptr<const std::string> owner_address, bool decoded = false);
  ~RefHandle();
  RefHandle(const RefHandle&) = delete;
  RefHandle& operator=(const RefHandle&) = delete;

  const ObjectId& id() const { return id_; }
  const std::string& owner_address() const { return *owner_address_; }
  // The object's entry in the table of the runtime that registered this
  // handle (nullptr: none was running), and that runtime's generation. The
  // entry stays put while the handle lives, as long as that runtime is the
  // current one (same generation): Get/Wait then read it without a lookup.
  runtime::ObjectEntry* entry() const { return entry_; }
  uint64_t runtime_generation() const { return runtime_generation_; }

 private:
  ObjectId id_;
  std::shared_ptr<const std::string> owner_address_;  // shared: one string per owner
  runtime::ObjectEntry* entry_ = nullptr;
  uint64_t runtime_generation_ = 0;  // 0: no runtime
};

// Called when a reference is serialised into a value: the owner pins the object
// until a process decoding the value registers as its borrower.
void MarkRefEscaped(const RefHandle& ref);

// One argument as submitted: an encoded value, or a reference resolved to its
// value before the task runs.
struct TaskArgument {
  std::string value;
  std::shared_ptr<RefHandle> ref;
};

// Where a task or actor may run (see lumen::SchedulingStrategy).
struct SchedulingOptions {
  enum class Kind { kDefault, kSpread, kPack, kNodeAffinity };
  Kind kind = Kind::kDefault;
  NodeId node;         // kNodeAffinity
  bool soft = false;   // kNodeAffinity: elsewhere when that node cannot
  std::string placement_group;  // binary group id, or empty
  int bundle_index = -1;        // -1: any bundle of the group
};

struct TaskOptions {
  int max_retries = 3;          // -1: without limit
  bool retry_exceptions = false;  // retry (within max_retries) when the task throws
  std::map<std::string, double> resources;  // empty: {CPU: 1}
  std::string name;
  SchedulingOptions scheduling;
};

std::shared_ptr<RefHandle> SubmitTask(std::string_view function, std::vector<TaskArgument> args,
                                      const TaskOptions& options);
// lumen::Cancel: throws lumen::Error for a ref this process does not own or
// that no task of this process returns.
void CancelTask(const RefHandle& ref, bool force);

// Stores an encoded value (inline in this process when small, else in the
// node's shared-memory store). `where`: the Put call site `lumen memory` shows
// for a stored value (empty: none).
std::shared_ptr<RefHandle> PutEncoded(std::string encoded, const std::source_location& where = {});
// Stores a value of `size` encoded bytes written by `write` straight into the
// store (no intermediate copy); `where` as for PutEncoded.
std::shared_ptr<RefHandle> PutWithWriter(uint64_t size, const std::function<void(uint8_t*)>& write,
                                         const std::source_location& where = {});

// An object's encoded bytes; `keepalive` pins them (a store mapping stays pinned
// until the last copy of it goes).
struct ObjectBytes {
  std::string_view bytes;
  std::shared_ptr<const void> keepalive;
};

// Blocks until every ref is ready; throws the first failure as its lumen::Error,
// GetTimeoutError after `timeout`.
std::vector<ObjectBytes> GetObjects(const std::vector<const RefHandle*>& refs,
                                    std::optional<std::chrono::milliseconds> timeout);

// Returns, in input order, which refs are ready once `num_returns` are, or when
// `timeout` passes.
std::vector<bool> WaitObjects(const std::vector<const RefHandle*>& refs, size_t num_returns,
                              std::optional<std::chrono::milliseconds> timeout);

// For tests: the steps this process's Get/Wait calls have taken so far (refs
// scanned on entry, countdowns as objects became ready, registrations removed).
// O(N) per call of N refs; a count that grows faster means a quadratic wait.
uint64_t AwaitStepsForTesting();
// For tests: this process's Get/Wait calls that spun before blocking so far
// (a task's thread in a worker spins first; a driver blocks at once).
uint64_t BlockSpinsForTesting();

// Throws lumen::TypeMismatchError / lumen::Error for a decode failure.
[[noreturn]] void ThrowDecodeError(const std::string& message, bool type_mismatch);

void InitRuntime(const Config& config, int argc, char** argv);
void ShutdownRuntime();
bool RuntimeInitialized();
// The head address of the cluster this driver is attached to ("" before Init).
std::string ClusterAddress();

// Registry: every process of one binary registers the same names.
using Invoker = std::function<std::string(const std::vector<ObjectBytes>& args)>;
using FactoryInvoker = std::function<std::shared_ptr<void>(const std::vector<ObjectBytes>& args)>;
using MethodInvoker =
    std::function<std::string(void* instance, const std::vector<ObjectBytes>& args)>;

struct RemoteFunction {
  enum class Kind { kFunction, kActorFactory, kMethod };
  Kind kind = Kind::kFunction;
  Invoker invoke;         // kFunction
  FactoryInvoker create;  // kActorFactory
  MethodInvoker call;     // kMethod
};

// `key` identifies the C++ entity: the bytes of its (member) function pointer.
bool RegisterFunction(std::string name, std::string key, RemoteFunction function);
// The registered name of a (member) function pointer, or an empty string.
// Names are never removed nor moved: the reference stays valid for the
// process's life (a TaskCaller keeps a view of it, no copy per call).
const std::string& FunctionName(const std::string& key);
// Entries are never removed; the pointer stays valid for the process's life.
const RemoteFunction* FindRemoteFunction(std::string_view name);

template <class P>
std::string PointerKey(P pointer) {
  std::string key(sizeof(P), '\0');
  std::memcpy(key.data(), &pointer, sizeof(P));
  return key;
}

// --- actors ---------------------------------------------------------------

struct ActorOptions {
  std::map<std::string, double> resources;  // held while alive (default none)
  std::map<std::string, double> placement;  // needed to place it (default CPU: 1)
  int max_restarts = 0;
  int max_task_retries = 0;
  int max_concurrency = 1;
  std::string name;
  bool detached = false;
  SchedulingOptions scheduling;
};

// Starts creating an actor; the returned handle's id is the actor's id.
std::shared_ptr<RefHandle> CreateActor(std::string_view factory, std::vector<TaskArgument> args,
                                       const ActorOptions& options);
std::shared_ptr<RefHandle> SubmitActorTask(const std::shared_ptr<RefHandle>& actor,
                                           std::string_view method,
                                           std::vector<TaskArgument> args);
void KillActor(const RefHandle& actor, bool no_restart);
// Throws lumen::Error when there is no live actor of that name.
std::shared_ptr<RefHandle> GetNamedActor(const std::string& name);
// Inside an actor method: the actor exits after this call returns.
void ExitActorAfterCall();

// --- placement groups -----------------------------------------------------

struct PlacementGroupRequest {
  std::string name;
  std::vector<std::map<std::string, double>> bundles;
  int strategy = 0;  // lumen::PlacementStrategy
};
// Returns the new group's binary id; throws lumen::PlacementGroupError.
std::string CreatePlacementGroup(const PlacementGroupRequest& request);
// True once every bundle is reserved; false at the timeout. Throws
// PlacementGroupError when the group was removed.
bool WaitPlacementGroup(const std::string& group_id, std::chrono::milliseconds timeout);
void RemovePlacementGroup(const std::string& group_id);
// "PENDING", "CREATED", "REMOVED", and where each bundle is (node ids, hex).
struct PlacementGroupInfo {
  std::string state;
  std::vector<std::string> bundle_nodes;
};
PlacementGroupInfo GetPlacementGroupInfo(const std::string& group_id);

}  // namespace lumen::internal
