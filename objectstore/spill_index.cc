#include "lumen/objectstore/spill_index.h"

#include <unistd.h>

namespace lumen::objectstore {

void SpillIndex::AddFile(const std::string& path,
                         const std::vector<std::pair<ObjectId, Range>>& objects) {
  uint64_t live = 0;
  for (const auto& [id, range] : objects) {
    if (objects_.contains(id)) continue;
    objects_.emplace(id, Location{path, range.offset, range.size});
    bytes_ += range.size;
    ++live;
  }
  if (live == 0) {
    RemoveFile(path);
    return;
  }
  files_[path] += live;
}

const SpillIndex::Location* SpillIndex::Find(const ObjectId& id) const {
  auto it = objects_.find(id);
  return it == objects_.end() ? nullptr : &it->second;
}

void SpillIndex::Remove(const ObjectId& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) return;
  bytes_ -= it->second.size;
  auto file = files_.find(it->second.path);
  if (file != files_.end() && --file->second == 0) {
    RemoveFile(file->first);
    files_.erase(file);
  }
  objects_.erase(it);
}

void SpillIndex::RemoveAll() {
  for (const auto& [path, live] : files_) RemoveFile(path);
  files_.clear();
  objects_.clear();
  bytes_ = 0;
}

void SpillIndex::Clear() {
  files_.clear();
  objects_.clear();
  bytes_ = 0;
}

void SpillIndex::RemoveFile(const std::string& path) {
  if (remove_) {
    remove_(path);
  } else {
    ::unlink(path.c_str());
  }
}

}  // namespace lumen::objectstore
