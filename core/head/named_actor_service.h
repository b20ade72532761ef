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

#include "lumen/actors/named_actor_directory.h"
#include "lumen/common/connection.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::head {

class NamedActorService {
 public:
  explicit NamedActorService(actors::NamedActorLimits limits) : directory_(limits) {}

  // Answers `msg` if it is a named-actor request; false for any other message.
  bool Handle(Connection& conn, proto::Envelope::Reader msg);

  const actors::NamedActorDirectory& directory() const { return directory_; }

 private:
  static constexpr const char* kDefaultNamespace = "";

  actors::NamedActorDirectory directory_;
};

}  // namespace lumen::head
