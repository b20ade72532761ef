#include "lumen/objectstore/object_table.h"

#include <algorithm>
#include <cassert>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lumen/common/format_bytes.h"

namespace lumen::objectstore {

ObjectTable::ObjectTable(ShmSegment* segment, uint64_t capacity)
    : segment_(segment), allocator_(capacity) {
  assert(segment == nullptr || capacity <= segment->size());
}

absl::StatusOr<uint64_t> ObjectTable::Create(ClientId client, const ObjectId& id,
                                             uint64_t size, bool secondary) {
  if (objects_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("object ", id.Hex(), " already exists"));
  }
  std::optional<uint64_t> offset = allocator_.Allocate(size);
  if (!offset) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "object store full: cannot fit an object of ", FormatBytes(size), "; ",
        FormatBytes(allocator_.used()), " of ", FormatBytes(allocator_.capacity()),
        " in use by ", objects_.size(), objects_.size() == 1 ? " object" : " objects",
        " (largest free block ", FormatBytes(allocator_.largest_free_block()), ")"));
  }
  if (segment_ != nullptr) {
    absl::Status reserved = segment_->Reserve(*offset, allocator_.AllocationSize(*offset));
    if (!reserved.ok()) {
      allocator_.Free(*offset);
      return reserved;
    }
  }
  objects_.emplace(id, Entry{.offset = *offset,
                             .size = size,
                             .creator = client,
                             .reader_pins = 0,
                             .state = ObjectState::kCreated,
                             .creator_pinned = true,
                             .secondary = secondary});
  clients_[client].unsealed.insert(id);
  CountPinned(*offset, +1);
  return *offset;
}

absl::Status ObjectTable::Seal(ClientId client, const ObjectId& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) {
    return absl::NotFoundError(absl::StrCat("seal of unknown object ", id.Hex()));
  }
  Entry& e = it->second;
  if (!e.creator_pinned) {
    return absl::FailedPreconditionError(absl::StrCat("object ", id.Hex(), " is already sealed"));
  }
  if (e.creator != client) {
    return absl::FailedPreconditionError(
        absl::StrCat("object ", id.Hex(), " was created by another client"));
  }
  e.creator_pinned = false;
  if (e.state == ObjectState::kCreated) e.state = ObjectState::kSealed;
  DropUnsealed(client, id);
  if (e.reader_pins == 0) CountPinned(e.offset, -1);
  MaybeFree(it);
  return absl::OkStatus();
}

absl::Status ObjectTable::Abort(ClientId client, const ObjectId& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) {
    return absl::NotFoundError(absl::StrCat("abort of unknown object ", id.Hex()));
  }
  Entry& e = it->second;
  if (!e.creator_pinned) {
    return absl::FailedPreconditionError(
        absl::StrCat("object ", id.Hex(), " is sealed and cannot be aborted"));
  }
  if (e.creator != client) {
    return absl::FailedPreconditionError(
        absl::StrCat("object ", id.Hex(), " was created by another client"));
  }
  DropUnsealed(client, id);
  // Unsealed objects cannot have reader pins.
  assert(e.reader_pins == 0);
  Free(it);
  return absl::OkStatus();
}

absl::StatusOr<ObjectTable::ObjectLocation> ObjectTable::Get(ClientId client,
                                                             const ObjectId& id) {
  auto it = objects_.find(id);
  if (it == objects_.end() || it->second.state == ObjectState::kDeletePending) {
    return absl::NotFoundError(absl::StrCat("object ", id.Hex(), " is not in the store"));
  }
  Entry& e = it->second;
  if (e.state != ObjectState::kSealed) {
    return absl::UnavailableError(absl::StrCat("object ", id.Hex(), " is not sealed yet"));
  }
  if (e.reader_pins == 0) CountPinned(e.offset, +1);  // sealed: no creator pin
  ++e.reader_pins;
  ++clients_[client].pins[id];
  return ObjectLocation{.offset = e.offset, .size = e.size};
}

void ObjectTable::Release(ClientId client, const ObjectId& id) {
  auto c = clients_.find(client);
  if (c == clients_.end()) return;
  auto pin = c->second.pins.find(id);
  if (pin == c->second.pins.end()) return;
  if (--pin->second == 0) c->second.pins.erase(pin);
  if (c->second.pins.empty() && c->second.unsealed.empty()) clients_.erase(c);

  auto it = objects_.find(id);
  assert(it != objects_.end() && it->second.reader_pins > 0);
  if (it == objects_.end()) return;
  Entry& e = it->second;
  if (--e.reader_pins == 0 && !e.creator_pinned) CountPinned(e.offset, -1);
  MaybeFree(it);
}

void ObjectTable::Delete(const ObjectId& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) return;
  it->second.state = ObjectState::kDeletePending;
  MaybeFree(it);
}

void ObjectTable::DisconnectClient(ClientId client) {
  auto c = clients_.find(client);
  if (c == clients_.end()) return;
  ClientState state = std::move(c->second);
  clients_.erase(c);

  for (const auto& [id, count] : state.pins) {
    auto it = objects_.find(id);
    assert(it != objects_.end() && it->second.reader_pins >= count);
    if (it == objects_.end()) continue;
    Entry& e = it->second;
    e.reader_pins -= static_cast<uint32_t>(count);
    if (e.reader_pins == 0 && !e.creator_pinned) CountPinned(e.offset, -1);
    MaybeFree(it);
  }
  for (const ObjectId& id : state.unsealed) {
    auto it = objects_.find(id);
    assert(it != objects_.end() && it->second.creator_pinned);
    if (it == objects_.end()) continue;
    Free(it);
  }
}

std::vector<ObjectTable::Candidate> ObjectTable::EvictionCandidates() const {
  std::vector<Candidate> out;
  for (const auto& [id, e] : objects_) {
    if (e.state != ObjectState::kSealed || e.creator_pinned || e.reader_pins > 0) continue;
    out.push_back(Candidate{id, e.offset, e.size, allocator_.AllocationSize(e.offset), e.secondary});
  }
  std::sort(out.begin(), out.end(),
            [](const Candidate& a, const Candidate& b) { return a.offset < b.offset; });
  return out;
}

uint64_t ObjectTable::Evict(const ObjectId& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) return 0;
  const Entry& e = it->second;
  if (e.state != ObjectState::kSealed || e.creator_pinned || e.reader_pins > 0) return 0;
  uint64_t bytes = allocator_.AllocationSize(e.offset);
  Free(it);
  return bytes;
}

uint64_t ObjectTable::RecountPinnedBytes() const {
  uint64_t bytes = 0;
  for (const auto& [id, e] : objects_) {
    if (e.creator_pinned || e.reader_pins > 0) bytes += allocator_.AllocationSize(e.offset);
  }
  return bytes;
}

absl::Status ObjectTable::CheckInvariants() const {
  if (absl::Status s = allocator_.CheckInvariants(); !s.ok()) return s;
  if (allocator_.num_allocations() != objects_.size()) {
    return absl::InternalError(absl::StrCat(allocator_.num_allocations(), " allocations for ",
                                            objects_.size(), " objects"));
  }
  absl::flat_hash_map<ObjectId, uint64_t> pins;
  for (const auto& [client, state] : clients_) {
    for (const auto& [id, n] : state.pins) pins[id] += n;
  }
  uint64_t pinned = 0;
  for (const auto& [id, e] : objects_) {
    if (allocator_.AllocationSize(e.offset) < e.size) {
      return absl::InternalError(absl::StrCat("object ", id.Hex(), " has no allocation of its size"));
    }
    auto p = pins.find(id);
    uint64_t n = p == pins.end() ? 0 : p->second;
    if (n != e.reader_pins) {
      return absl::InternalError(absl::StrCat("object ", id.Hex(), " has ", e.reader_pins,
                                              " reader pins, its clients hold ", n));
    }
    if (e.creator_pinned || e.reader_pins > 0) ++pinned;
  }
  if (pinned != num_pinned_) {
    return absl::InternalError(absl::StrCat(pinned, " pinned objects, counted ", num_pinned_));
  }
  if (uint64_t bytes = RecountPinnedBytes(); bytes != pinned_bytes_) {
    return absl::InternalError(
        absl::StrCat(bytes, " bytes of pinned objects, counted ", pinned_bytes_));
  }
  return absl::OkStatus();
}

bool ObjectTable::Contains(const ObjectId& id) const { return objects_.contains(id); }

absl::StatusOr<ObjectState> ObjectTable::GetState(const ObjectId& id) const {
  auto it = objects_.find(id);
  if (it == objects_.end()) {
    return absl::NotFoundError(absl::StrCat("object ", id.Hex(), " is not in the store"));
  }
  return it->second.state;
}

void ObjectTable::ForEachObject(const std::function<void(const ObjectInfo&)>& fn) const {
  for (const auto& [id, e] : objects_) {
    fn(ObjectInfo{.id = id,
                  .size = e.size,
                  .state = e.state,
                  .pins = e.reader_pins + (e.creator_pinned ? 1 : 0),
                  .secondary = e.secondary});
  }
}

ObjectTable::Stats ObjectTable::GetStats() const {
  return Stats{.capacity = allocator_.capacity(),
               .used = allocator_.used(),
               .num_objects = objects_.size(),
               .num_pinned = num_pinned_};
}

void ObjectTable::MaybeFree(absl::flat_hash_map<ObjectId, Entry>::iterator it) {
  const Entry& e = it->second;
  if (e.state == ObjectState::kDeletePending && !e.creator_pinned && e.reader_pins == 0) {
    Free(it);
  }
}

void ObjectTable::Free(absl::flat_hash_map<ObjectId, Entry>::iterator it) {
  const Entry& e = it->second;
  if (e.creator_pinned || e.reader_pins > 0) CountPinned(e.offset, -1);
  allocator_.Free(e.offset);
  objects_.erase(it);
}

void ObjectTable::CountPinned(uint64_t offset, int delta) {
  const uint64_t bytes = allocator_.AllocationSize(offset);
  if (delta > 0) {
    ++num_pinned_;
    pinned_bytes_ += bytes;
  } else {
    assert(num_pinned_ > 0 && pinned_bytes_ >= bytes);
    --num_pinned_;
    pinned_bytes_ -= bytes;
  }
}

void ObjectTable::DropUnsealed(ClientId client, const ObjectId& id) {
  auto c = clients_.find(client);
  if (c == clients_.end()) return;
  c->second.unsealed.erase(id);
  if (c->second.pins.empty() && c->second.unsealed.empty()) clients_.erase(c);
}

}  // namespace lumen::objectstore
