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
    ::unlink(path.c_str());
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
    ::unlink(file->first.c_str());
    files_.erase(file);
  }
  objects_.erase(it);
}

void SpillIndex::RemoveAll() {
  for (const auto& [path, live] : files_) ::unlink(path.c_str());
  files_.clear();
  objects_.clear();
  bytes_ = 0;
}

}  // namespace lumen::objectstore
