// HeadStateRecorder: what the head's tables tell their HeadStore. Each table
// that must outlive the head's process (nodes, dead nodes, ended jobs, named
// actors, placement groups, the key-value store) reports each mutation here,
// after it took effect and before the head answers the request that made it;
// the recorder turns it into a HeadRecord and appends it. Without a store
// (persistence off) every call does nothing.
//
//   HeadStateRecorder recorder(std::make_unique<FileHeadStore>(...));
//   ASSIGN_OR_RETURN(HeadState state, recorder.Load());  // then restore the tables from it
//   recorder.Put(HeadTable::kKv, HeadStateRecorder::JoinKey(ns, key), value);
//   recorder.Delete(HeadTable::kKv, HeadStateRecorder::JoinKey(ns, key));
//
// A failed append is logged (rate-limited) and counted; the head serves on
// (that mutation is then lost at a restart). Not thread-safe: owned by the
// head's event loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/head/head_store.h"

namespace lumen::head {

class HeadStateRecorder {
 public:
  // `store` nullptr: persistence off.
  explicit HeadStateRecorder(std::unique_ptr<HeadStore> store) : store_(std::move(store)) {}

  bool enabled() const { return store_ != nullptr; }
  // The persisted state (empty when persistence is off).
  [[nodiscard]] absl::StatusOr<HeadState> Load();
  void Put(HeadTable table, std::string key, std::string value);
  void Delete(HeadTable table, std::string key);
  // Compacts the store now (errors are logged).
  void Snapshot();
  std::string Describe() const { return store_ ? store_->Describe() : "no persistence"; }
  uint64_t failed_appends() const { return failed_appends_; }
  HeadStore* store() { return store_.get(); }

  // A two-part key: `ns` '\0' `key` (namespaces hold no NUL).
  static std::string JoinKey(const std::string& ns, const std::string& key);
  static std::pair<std::string, std::string> SplitKey(const std::string& joined);
  // Strings packed with their lengths (u32 each), and back; false when
  // `packed` is malformed.
  static std::string Pack(const std::vector<std::string>& parts);
  static bool Unpack(const std::string& packed, std::vector<std::string>* parts);

 private:
  void Append(const HeadRecord& record);

  std::unique_ptr<HeadStore> store_;
  uint64_t failed_appends_ = 0;
};

}  // namespace lumen::head
