// NamedActorService: the head's answers to named-actor requests (register,
// look up by name or by id, update a detached actor's address, unregister),
// over the directory in lumen/actors/named_actor_directory.h. The wire has no
// namespaces yet: every name lives in the default namespace "".
//
//   NamedActorService names({.max_named_actors = limits.max_named_actors,
//                            .max_name_bytes = limits.max_name_bytes});
//   if (names.Handle(conn, msg)) return;   // a named-actor request: answered
//
// Only on the head's event loop (the directory checks it in debug builds).
#pragma once

#include "core/head/head_state_recorder.h"
#include "lumen/actors/named_actor_directory.h"
#include "lumen/common/connection.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::head {

class NamedActorService {
 public:
  // `recorder` (borrowed, may be nullptr) is told every change (persistence).
  explicit NamedActorService(actors::NamedActorLimits limits,
                             HeadStateRecorder* recorder = nullptr)
      : directory_(limits), recorder_(recorder) {}

  // Answers `msg` if it is a named-actor request; false for any other message.
  bool Handle(Connection& conn, proto::Envelope::Reader msg);

  const actors::NamedActorDirectory& directory() const { return directory_; }
  // Puts a persisted entry back (a restarted head, before it serves); `key`
  // and `value` as the recorder wrote them. False when malformed or refused.
  bool Restore(const std::string& key, const std::string& value);

 private:
  static constexpr const char* kDefaultNamespace = "";

  // Tells the recorder the entry of (`ns`, `name`) as it is now (deleted when absent).
  void Record(const std::string& ns, const std::string& name);

  actors::NamedActorDirectory directory_;
  HeadStateRecorder* recorder_;
};

}  // namespace lumen::head
