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
#include "lumen/proto/lumen.capnp.h"

namespace lumen::head {

// `s`'s bytes as a Data field; the reader borrows `s`.
inline capnp::Data::Reader BytesOf(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

inline std::string StringOf(capnp::Data::Reader data) {
  return std::string(reinterpret_cast<const char*>(data.begin()), data.size());
}

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
