// Small conversions between Lumen's C++ types and its Cap'n Proto messages.
//
//   env.setWaitObject(lumen::DataOf(object_id));
//   ObjectId id = lumen::IdFrom<ObjectId>(msg.getWaitObject());
//   lumen::SetResources(lease.initResources(map.size()), map);
//   spec.setGroupId(lumen::BytesOf(group_id));      // std::string -> Data
//   std::string group = lumen::StringOf(spec.getGroupId());
//
// Stateless; thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen {

// An id's bytes as a Data field (the reader borrows `id`'s storage).
template <class Id>
capnp::Data::Reader DataOf(const Id& id) {
  return capnp::Data::Reader(id.data(), Id::kSize);
}

// `bytes` as a Data field; the reader borrows `bytes`' storage (until the
// field is copied into a message).
inline capnp::Data::Reader BytesOf(std::string_view bytes) {
  return capnp::Data::Reader(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// A copy of a Data field's bytes.
inline std::string StringOf(capnp::Data::Reader data) {
  return std::string(reinterpret_cast<const char*>(data.begin()), data.size());
}

// An id from a Data field; a field of the wrong size gives the nil id.
template <class Id>
Id IdFrom(capnp::Data::Reader data) {
  return Id::FromBinary(std::string_view(reinterpret_cast<const char*>(data.begin()), data.size()));
}

inline void SetResources(capnp::List<proto::Resource>::Builder list,
                         const std::map<std::string, double>& values) {
  size_t i = 0;
  for (const auto& [name, qty] : values) {
    list[i].setName(name);
    list[i].setQuantity(qty);
    ++i;
  }
}

// The key of a resource shape, "CPU=1;GPU=2;": equal maps give equal keys.
// Used to group requests of one shape (a driver's task queues, a node's
// infeasible demand).
inline std::string ResourceShapeKey(const std::map<std::string, double>& resources) {
  std::string key;
  for (const auto& [name, qty] : resources) absl::StrAppend(&key, name, "=", qty, ";");
  return key;
}

inline std::map<std::string, double> ReadResources(capnp::List<proto::Resource>::Reader list) {
  std::map<std::string, double> out;
  for (auto r : list) out[r.getName().cStr()] = r.getQuantity();
  return out;
}

}  // namespace lumen
