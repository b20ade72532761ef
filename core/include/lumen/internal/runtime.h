// The non-template runtime entry points behind lumen.h's templates.
// Internal: user code includes <lumen/lumen.h> instead.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
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
  ~RefHandle();
  RefHandle(const RefHandle&) = delete;
  RefHandle& operator=(const RefHandle&) = delete;

  const ObjectId& id() const { return id_; }
  const std::string& owner_address() const { return owner_address_; }

 private:
  ObjectId id_;
  std::string owner_address_;
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

struct TaskOptions {
  int max_retries = 3;
  std::map<std::string, double> resources;  // empty: {CPU: 1}
  std::string name;
};

std::shared_ptr<RefHandle> SubmitTask(std::string_view function, std::vector<TaskArgument> args,
                                      const TaskOptions& options);

// Stores an encoded value (inline in this process when small, else in the
// node's shared-memory store).
std::shared_ptr<RefHandle> PutEncoded(std::string encoded);
// Stores a value of `size` encoded bytes written by `write` straight into the
// store (no intermediate copy).
std::shared_ptr<RefHandle> PutWithWriter(uint64_t size, const std::function<void(uint8_t*)>& write);

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

// Throws lumen::TypeMismatchError / lumen::Error for a decode failure.
[[noreturn]] void ThrowDecodeError(const std::string& message, bool type_mismatch);

void InitRuntime(const Config& config, int argc, char** argv);
void ShutdownRuntime();
bool RuntimeInitialized();
// The head address of the cluster this driver is attached to ("" before Init).
std::string ClusterAddress();

// Task registry: every process of one binary registers the same names.
using Invoker = std::function<std::string(const std::vector<ObjectBytes>& args)>;
bool RegisterFunction(std::string name, const void* key, Invoker invoker);
// The registered name of a function pointer, or empty.
std::string FunctionName(const void* key);
const Invoker* FindInvoker(std::string_view name);

}  // namespace lumen::internal
