#include "core/head/named_actor_service.h"

#include <string>
#include <vector>

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
      std::string actor_id = StringOf(entry.getActorId());
      // A retried registration (its first reply was lost with a head that
      // died after persisting it) finds its own actor there: that is success.
      const actors::NamedActorEntry* existing = directory_.Lookup(kDefaultNamespace, name);
      absl::Status registered =
          existing != nullptr && existing->actor_id == actor_id
              ? absl::OkStatus()
              : directory_.Register(kDefaultNamespace, name,
                                    {actor_id, entry.getOwnerAddress().cStr(), ""});
      if (registered.ok()) Record(kDefaultNamespace, name);
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
      if (directory_.UpdateAddress(kDefaultNamespace, entry.getName().cStr(),
                                   StringOf(entry.getActorId()), entry.getAddress().cStr())) {
        Record(kDefaultNamespace, entry.getName().cStr());
      }
      SendAck(conn, request_id);
      return true;
    }
    case proto::Envelope::UNREGISTER_ACTOR_NAME: {
      auto entry = msg.getUnregisterActorName();
      if (directory_.Unregister(kDefaultNamespace, entry.getName().cStr(),
                                StringOf(entry.getActorId()))) {
        Record(kDefaultNamespace, entry.getName().cStr());
      }
      SendAck(conn, request_id);
      return true;
    }
    default:
      return false;
  }
}

void NamedActorService::Record(const std::string& ns, const std::string& name) {
  if (recorder_ == nullptr) return;
  std::string key = HeadStateRecorder::JoinKey(ns, name);
  const actors::NamedActorEntry* entry = directory_.Lookup(ns, name);
  if (entry == nullptr) {
    recorder_->Delete(HeadTable::kNamedActors, std::move(key));
    return;
  }
  recorder_->Put(HeadTable::kNamedActors, std::move(key),
                 HeadStateRecorder::Pack({entry->actor_id, entry->owner_address, entry->address}));
}

bool NamedActorService::Restore(const std::string& key, const std::string& value) {
  auto [ns, name] = HeadStateRecorder::SplitKey(key);
  std::vector<std::string> parts;
  if (!HeadStateRecorder::Unpack(value, &parts) || parts.size() != 3) return false;
  if (!directory_.Register(ns, name, {parts[0], parts[1], ""}).ok()) return false;
  if (!parts[2].empty()) directory_.UpdateAddress(ns, name, parts[0], parts[2]);
  return true;
}

}  // namespace lumen::head
