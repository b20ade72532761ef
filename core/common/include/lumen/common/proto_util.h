// Small conversions between Lumen's C++ types and its Cap'n Proto messages.
//
//   env.setWaitObject(lumen::DataOf(object_id));
//   ObjectId id = lumen::IdFrom<ObjectId>(msg.getWaitObject());
//   lumen::SetResources(lease.initResources(map.size()), map);
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "lumen/proto/lumen.capnp.h"

namespace lumen {

// An id's bytes as a Data field (the reader borrows `id`'s storage).
template <class Id>
capnp::Data::Reader DataOf(const Id& id) {
  return capnp::Data::Reader(id.data(), Id::kSize);
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

inline std::map<std::string, double> ReadResources(capnp::List<proto::Resource>::Reader list) {
  std::map<std::string, double> out;
  for (auto r : list) out[r.getName().cStr()] = r.getQuantity();
  return out;
}

}  // namespace lumen
