// The head's actor-name requests as the core worker makes them: one builder
// for the ActorName entry and one parser for the head's ActorName reply.
// Stateless; thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "lumen/common/ids.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::runtime {

struct ActorNameEntry {
  ObjectId actor_id;
  std::string owner_address;
  std::string address;  // detached actors: where the process runs
};

// Fills a register/unregister/update entry (empty strings are left unset).
void FillActorName(proto::ActorName::Builder entry, const std::string& name, const ObjectId& id,
                   const std::string& owner_address = "", const std::string& address = "");

// The entry in the head's reply, or its error: InvalidArgument with the head's
// text when it refused, Internal for a reply that is no ActorName.
[[nodiscard]] absl::StatusOr<ActorNameEntry> ParseActorNameReply(proto::Envelope::Reader reply);

// Whether `status` (from ParseActorNameReply) is the head's own answer (a
// refusal or an unexpected reply) rather than a failure to reach it.
inline bool IsHeadAnswer(const absl::Status& status) {
  return status.code() == absl::StatusCode::kInvalidArgument ||
         status.code() == absl::StatusCode::kInternal;
}

// Blocking (user threads only, never the io thread): one request to the head
// and its ActorName reply parsed; Unavailable/DeadlineExceeded when the head
// cannot be reached.
[[nodiscard]] absl::StatusOr<ActorNameEntry> CallHeadForActorName(
    const std::string& head_address, const std::function<void(proto::Envelope::Builder)>& fill,
    std::chrono::milliseconds deadline);

}  // namespace lumen::runtime
