// The head's reply builders: every answer the head sends carries the request
// id of what it answers, and these build that envelope once, so a handler
// says what to answer, not how to frame it.
//
//   SendAck(conn, msg.getRequestId());
//   SendReply(conn, msg.getRequestId(), [&](proto::Envelope::Builder env) {
//     env.initActorNameReply().setOk(true);
//   });
//
// Stateless; call them on the connection's io thread (as Connection requires).
#pragma once

#include <cstdint>
#include <string>

#include "lumen/common/connection.h"
#include "lumen/common/proto_util.h"  // BytesOf, StringOf: head handlers use them
#include "lumen/proto/lumen.capnp.h"

namespace lumen::head {

// Builds an envelope answering `request_id`, lets `fill` set its body, sends it.
template <class Fill>
void SendReply(Connection& conn, uint64_t request_id, Fill&& fill) {
  OutMessage out;
  proto::Envelope::Builder env = out.Init();
  env.setRequestId(request_id);
  fill(env);
  conn.Send(out.builder());
}

// Answers `request_id` with a bare Ack.
inline void SendAck(Connection& conn, uint64_t request_id) {
  SendReply(conn, request_id, [](proto::Envelope::Builder env) { env.setAck(); });
}

}  // namespace lumen::head
