#include "core/head/named_actor_service.h"

#include <string>

#include "core/head/head_replies.h"

namespace lumen::head {
namespace {

void FillEntry(proto::ActorName::Builder reply, const std::string& name,
               const actors::NamedActorEntry& entry) {
  reply.setOk(true);
  reply.setName(name);
  reply.setActorId(BytesOf(entry.actor_id));
  reply.setOwnerAddress(entry.owner_address);
  reply.setAddress(entry.address);
}

}  // namespace

bool NamedActorService::Handle(Connection& conn, proto::Envelope::Reader msg) {
  const uint64_t request_id = msg.getRequestId();
  switch (msg.which()) {
    case proto::Envelope::REGISTER_ACTOR_NAME: {
      auto entry = msg.getRegisterActorName();
      std::string name = entry.getName().cStr();
      absl::Status registered = directory_.Register(
          kDefaultNamespace, name,
          {StringOf(entry.getActorId()), entry.getOwnerAddress().cStr(), ""});
      SendReply(conn, request_id, [&](proto::Envelope::Builder env) {
        auto reply = env.initActorNameReply();
        reply.setName(name);
        reply.setOk(registered.ok());
        if (!registered.ok()) reply.setError(std::string(registered.message()));
      });
      return true;
    }
    case proto::Envelope::LOOKUP_ACTOR_NAME: {
      std::string name = msg.getLookupActorName().cStr();
      const actors::NamedActorEntry* found = directory_.Lookup(kDefaultNamespace, name);
      SendReply(conn, request_id, [&](proto::Envelope::Builder env) {
        auto reply = env.initActorNameReply();
        reply.setName(name);
        if (found != nullptr) {
          FillEntry(reply, name, *found);
        } else {
          reply.setOk(false);
          reply.setError("no actor named '" + name + "'");
        }
      });
      return true;
    }
    case proto::Envelope::LOOKUP_ACTOR_BY_ID: {
      auto found = directory_.FindById(StringOf(msg.getLookupActorById()));
      SendReply(conn, request_id, [&](proto::Envelope::Builder env) {
        auto reply = env.initActorNameReply();
        reply.setOk(false);
        if (found.has_value()) FillEntry(reply, found->name, found->entry);
      });
      return true;
    }
    case proto::Envelope::UPDATE_ACTOR_ADDRESS: {
      auto entry = msg.getUpdateActorAddress();
      directory_.UpdateAddress(kDefaultNamespace, entry.getName().cStr(),
                               StringOf(entry.getActorId()), entry.getAddress().cStr());
      SendAck(conn, request_id);
      return true;
    }
    case proto::Envelope::UNREGISTER_ACTOR_NAME: {
      auto entry = msg.getUnregisterActorName();
      directory_.Unregister(kDefaultNamespace, entry.getName().cStr(),
                            StringOf(entry.getActorId()));
      SendAck(conn, request_id);
      return true;
    }
    default:
      return false;
  }
}

}  // namespace lumen::head
