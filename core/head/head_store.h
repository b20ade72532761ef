// HeadStore: where the head keeps the state that must outlive its process
// (the node table, ended jobs, named actors, placement groups, the key-value
// store), so that a head restarted after a crash (kill -9) serves the same
// tables. Two implementations: a write-ahead log with snapshots in the session
// directory (FileHeadStore, the default) and an external Redis
// (RedisHeadStore, `--external-storage redis://HOST:PORT`).
//
// The state is a set of tables, each a map from a key to an opaque value
// (HeadStateRecorder encodes the head's entries into them). A record puts one
// entry or deletes it; applying the same record twice gives the same state, so
// a store may replay a record it is unsure about.
//
//   std::unique_ptr<HeadStore> store = ...;
//   ASSIGN_OR_RETURN(HeadState state, store->Load());   // once, before any Append
//   RETURN_IF_ERROR(store->Append({HeadTable::kKv, "ns\0key", "value"}));
//   RETURN_IF_ERROR(store->Snapshot());                 // compact (the log store)
//
// Durability: Append returns once the record is in the kernel (write(2) or the
// Redis server's reply), before the head answers the request that made it, so
// a head killed after answering has the record. Whether it survives a crash of
// the machine is the implementation's fsync policy (file_head_store.h).
//
// Not thread-safe: owned by the head's event loop.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lumen::head {

// The persisted tables. Values are never renumbered (they are in the files).
enum class HeadTable : uint8_t {
  kNodes = 1,            // node id bytes -> its registration (a framed NodeStats)
  kDeadNodes = 2,        // node id bytes -> "" (declared dead: never accepted again)
  kEndedJobs = 3,        // job id bytes -> the order it ended in (8 bytes, little endian)
  kNamedActors = 4,      // namespace '\0' name -> actor id, owner and address
  kPlacementGroups = 5,  // group id bytes -> a framed PlacementGroupState
  kKv = 6,               // namespace '\0' key -> value
};
inline constexpr uint8_t kMaxHeadTable = 6;
const char* HeadTableName(HeadTable table);

// One mutation: put `value` under `key` in `table`, or delete `key`.
struct HeadRecord {
  HeadTable table = HeadTable::kKv;
  std::string key;
  std::string value;
  bool deleted = false;
};

// Every table's entries, ordered by key.
using HeadState = std::map<HeadTable, std::map<std::string, std::string>>;

// Applies `record` to `state`.
void ApplyRecord(const HeadRecord& record, HeadState* state);

class HeadStore {
 public:
  virtual ~HeadStore() = default;
  // Reads the persisted state. Called once, before the first Append. A damaged
  // tail (a record cut short by a crash) is ignored and logged; other damage
  // is DataLoss.
  [[nodiscard]] virtual absl::StatusOr<HeadState> Load() = 0;
  // Persists one mutation. Errors: Internal / Unavailable (the disk or the
  // server failed; the head logs it and serves on without persistence for it).
  [[nodiscard]] virtual absl::Status Append(const HeadRecord& record) = 0;
  // Compacts what Load would replay (a no-op for stores that keep the state
  // itself, such as Redis).
  [[nodiscard]] virtual absl::Status Snapshot() = 0;
  // "write-ahead log in DIR", "redis at HOST:PORT": for logs and errors.
  virtual std::string Describe() const = 0;
};

}  // namespace lumen::head
