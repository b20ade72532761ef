// ReferenceCounter: local refs, borrowers, escapes; frees an object when
// nothing needs it. Thread-safe under the object table's lock.
#include "core/worker/reference_counter.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lumen/common/proto_util.h"

namespace lumen::runtime {

ReferenceCounter::ReferenceCounter(ObjectTable& table, Callbacks callbacks)
    : table_(table), callbacks_(std::move(callbacks)) {}

ObjectEntry* ReferenceCounter::AddLocalRef(const ObjectId& id, const std::string& owner,
                                           bool decoded) {
  bool register_borrower = false;
  ObjectEntry* entry;
  {
    ObjectTable::Locked objects(table_);
    auto [it, inserted] = objects->try_emplace(id);
    ObjectEntry& e = it->second;
    entry = &e;
    if (inserted) {
      e.owned = owner == self_address_;
      // Owned: the owner is this process (readers use its own address), so
      // the entry does not carry a copy (~100 bytes per object).
      if (!e.owned) e.owner_address = owner;
    }
    ++e.local_refs;
    if (decoded && inserted && e.owned) {
      // Our own object, already freed: nothing will ever fill it.
      e.SetFailed(Failure{proto::FailureKind::OBJECT_LOST, "",
                          absl::StrCat("object ", id.Hex(),
                                       " was freed by its owner before this reference to it "
                                       "was read"),
                          ""});
      e.ready.store(true, std::memory_order_release);
    }
    if (decoded) {
      if (e.owned) {
        if (e.pending_escapes > 0) --e.pending_escapes;
      } else if (!e.registered_borrower) {
        e.registered_borrower = register_borrower = true;
      }
    }
  }
  if (register_borrower) callbacks_.send_borrower_change(id, owner, true);
  return entry;
}

void ReferenceCounter::RemoveLocalRef(const ObjectId& id) {
  std::string owner;
  {
    ObjectTable::Locked objects(table_);
    auto it = objects->find(id);
    if (it == objects->end()) return;
    --it->second.local_refs;
    if (it->second.local_refs == 0 && it->second.registered_borrower) {
      it->second.registered_borrower = false;
      owner = it->second.owner_address;
    }
    MaybeFreeLocked(objects, it);
  }
  if (!owner.empty()) callbacks_.send_borrower_change(id, owner, false);
}

void ReferenceCounter::MarkEscaped(const ObjectId& id) {
  std::string owner;
  {
    ObjectTable::Locked objects(table_);
    auto it = objects->find(id);
    if (it == objects->end()) return;
    if (it->second.owned) {
      ++it->second.pending_escapes;
      return;
    }
    owner = it->second.owner_address;
  }
  callbacks_.send_escape(id, owner);
}

void ReferenceCounter::OnEscapeRef(const ObjectId& id) {
  ObjectTable::Locked objects(table_);
  auto it = objects->find(id);
  if (it != objects->end() && it->second.owned) ++it->second.pending_escapes;
}

void ReferenceCounter::ApplyBorrowerDelta(const ObjectId& id, int delta) {
  ObjectTable::Locked objects(table_);
  auto it = objects->find(id);
  if (it == objects->end() || !it->second.owned) return;
  ObjectEntry& e = it->second;
  if (delta > 0) {
    e.borrowers += delta;
    e.pending_escapes = std::max(0, e.pending_escapes - delta);
  } else {
    e.borrowers = std::max(0, e.borrowers + delta);
    MaybeFreeLocked(objects, it);
  }
}

void ReferenceCounter::MaybeFree(const ObjectId& id) {
  ObjectTable::Locked objects(table_);
  auto it = objects->find(id);
  if (it != objects->end()) MaybeFreeLocked(objects, it);
}

void ReferenceCounter::MaybeFreeLocked(ObjectTable::Locked& objects,
                                       ObjectTable::Map::iterator it) {
  ObjectEntry& entry = it->second;
  if (entry.local_refs > 0 || entry.pending_escapes > 0 || entry.borrowers > 0 ||
      !entry.on_ready.empty()) {
    return;
  }
  Freed freed;
  freed.id = it->first;
  freed.owned = entry.owned;
  freed.is_actor = entry.owned && entry.is_actor;
  if (entry.owned && entry.ready && entry.kind == ObjectEntry::Kind::kStored) {
    freed.stored = true;
    for (const auto& [node, address] : entry.locations) freed.copies.push_back(address);
  }
  objects->erase(it);
  if (callbacks_.on_freed) callbacks_.on_freed(std::move(freed));
}

}  // namespace lumen::runtime
