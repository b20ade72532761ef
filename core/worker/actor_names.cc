#include "core/worker/actor_names.h"

#include <capnp/serialize.h>

#include "absl/strings/str_cat.h"
#include "lumen/common/head_client.h"
#include "lumen/common/proto_util.h"

namespace lumen::runtime {

void FillActorName(proto::ActorName::Builder entry, const std::string& name, const ObjectId& id,
                   const std::string& owner_address, const std::string& address) {
  entry.setName(name);
  entry.setActorId(DataOf(id));
  if (!owner_address.empty()) entry.setOwnerAddress(owner_address);
  if (!address.empty()) entry.setAddress(address);
}

absl::StatusOr<ActorNameEntry> ParseActorNameReply(proto::Envelope::Reader reply) {
  try {
    if (!reply.isActorNameReply()) return absl::InternalError("unexpected reply from the head");
    auto entry = reply.getActorNameReply();
    if (!entry.getOk()) return absl::InvalidArgumentError(entry.getError().cStr());
    return ActorNameEntry{IdFrom<ObjectId>(entry.getActorId()), entry.getOwnerAddress().cStr(),
                          entry.getAddress().cStr()};
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("bad reply from the head: ", e.what()));
  }
}

absl::StatusOr<ActorNameEntry> CallHeadForActorName(
    const std::string& head_address, const std::function<void(proto::Envelope::Builder)>& fill,
    std::chrono::milliseconds deadline) {
  auto words = CallHead(head_address, fill, deadline);
  if (!words.ok()) return words.status();
  try {
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words->data(), words->size()));
    return ParseActorNameReply(reader.getRoot<proto::Envelope>());
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("bad reply from the head: ", e.what()));
  }
}

}  // namespace lumen::runtime
