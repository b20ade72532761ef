// An object's value on the wire: a failure to and from its proto, and the
// proto value (inline bytes, a stored copy's location, or the error) of an
// entry of the object table, as owners send it to readers (objectStatus) and
// in task arguments. Internal to core/worker; pure functions, any thread.
#pragma once

#include <string>

#include "core/worker/object_table.h"
#include "lumen/common/proto_util.h"

namespace lumen::runtime {

inline Failure FailureFromProto(proto::TaskFailure::Reader f) {
  return Failure{f.getKind(), f.getExceptionType().cStr(), f.getMessage().cStr(),
                 f.getLocation().cStr(), f.getCancelled()};
}

inline void FailureToProto(const Failure& failure, proto::TaskFailure::Builder out) {
  out.setKind(failure.kind);
  out.setExceptionType(failure.exception_type);
  out.setMessage(failure.message);
  out.setLocation(failure.location);
  out.setCancelled(failure.cancelled);
}

// `entry`'s value; a stored object's owner is `self_address` when we own it.
// The caller holds the table's lock.
inline void FillValue(proto::Value::Builder out, const ObjectEntry& entry,
                      const std::string& self_address) {
  switch (entry.kind) {
    case ObjectEntry::Kind::kInline:
      out.setInline(BytesOf(*entry.value));
      break;
    case ObjectEntry::Kind::kStored: {
      auto stored = out.initStored();
      stored.setSize(entry.stored_size);
      if (!entry.locations.empty()) {
        stored.setNodeId(DataOf(entry.locations.front().first));
        stored.setNodeAddress(entry.locations.front().second);
      }
      stored.setOwnerAddress(entry.owned ? self_address : entry.owner_address);
      break;
    }
    case ObjectEntry::Kind::kFailed:
      FailureToProto(*entry.failure, out.initError());
      break;
  }
}

}  // namespace lumen::runtime
