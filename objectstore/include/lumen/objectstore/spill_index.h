// SpillIndex: where the store's spilled objects are on disk, and which spill
// file can go. A spill file holds one or more objects back to back; it is
// deleted when the last of its objects is removed from the index.
//
//   SpillIndex index;
//   index.AddFile("/spill/batch-1", {{id1, {0, 100}}, {id2, {100, 50}}});
//   if (const SpillIndex::Location* at = index.Find(id2)) Read(at->path, at->offset, at->size);
//   index.Remove(id1);   // the file stays: id2 is still in it
//   index.Remove(id2);   // the file is unlinked
//
// Not thread-safe (owned by the store's event loop). Files are removed through
// the function given to the constructor (the store hands them to its
// SpillWorker: unlinking a large file can take long on some filesystems).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "lumen/common/ids.h"

namespace lumen::objectstore {

class SpillIndex {
 public:
  struct Location {
    std::string path;  // the spill file
    uint64_t offset;   // of the object's bytes in the file
    uint64_t size;
  };
  struct Range {
    uint64_t offset;
    uint64_t size;
  };

  // Removes a spill file; nullptr: ::unlink, synchronously.
  using RemoveFn = std::function<void(const std::string& path)>;
  explicit SpillIndex(RemoveFn remove = nullptr) : remove_(std::move(remove)) {}
  // Removes every file still indexed.
  ~SpillIndex() { RemoveAll(); }
  SpillIndex(const SpillIndex&) = delete;
  SpillIndex& operator=(const SpillIndex&) = delete;

  // `path` holds `objects`; an object already indexed keeps its older copy
  // (this range of the file is dead). A file with no live object is unlinked.
  void AddFile(const std::string& path, const std::vector<std::pair<ObjectId, Range>>& objects);
  // The object's disk copy, or nullptr. The pointer is valid until the next
  // call that changes the index.
  const Location* Find(const ObjectId& id) const;
  bool Contains(const ObjectId& id) const { return objects_.contains(id); }
  // Forgets the object's disk copy (no-op if none); unlinks its file when it
  // was the last live object in it.
  void Remove(const ObjectId& id);
  // Removes every file and forgets everything.
  void RemoveAll();
  // Forgets everything, removing nothing (the caller removes the directory).
  void Clear();

  // Calls `fn(id, location)` for every object with a disk copy, in no
  // particular order; `fn` must not change the index. O(n).
  template <class Fn>
  void ForEach(Fn&& fn) const {
    for (const auto& [id, at] : objects_) fn(id, at);
  }

  uint64_t num_objects() const { return objects_.size(); }
  uint64_t num_files() const { return files_.size(); }
  // Bytes of live objects on disk.
  uint64_t bytes() const { return bytes_; }

 private:
  void RemoveFile(const std::string& path);

  RemoveFn remove_;
  absl::flat_hash_map<ObjectId, Location> objects_;
  absl::flat_hash_map<std::string, uint64_t> files_;  // path -> live objects in it
  uint64_t bytes_ = 0;
};

}  // namespace lumen::objectstore
