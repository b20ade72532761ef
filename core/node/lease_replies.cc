#include "core/node/lease_replies.h"

#include "lumen/common/connection.h"
#include "lumen/common/proto_util.h"

namespace lumen::node {
namespace {

// The one leaseReply builder: an envelope answering `request_id`.
proto::LeaseReply::Builder InitReply(OutMessage& out, uint64_t request_id) {
  auto env = out.Init();
  env.setRequestId(request_id);
  return env.initLeaseReply();
}

}  // namespace

void LeaseReplies::Grant(ClientId client, uint64_t request_id, const LeaseGrant& grant) {
  OutMessage out;
  auto reply = InitReply(out, request_id);
  reply.setGranted(true);
  reply.setLeaseId(grant.lease_id);
  reply.setWorkerId(DataOf(grant.worker));
  reply.setWorkerAddress(grant.worker_address);
  reply.setWorkerPid(grant.worker_pid);
  reply.setNodeId(DataOf(node_));
  auto ids = reply.initGpuIds(grant.gpu_ids.size());
  for (size_t i = 0; i < grant.gpu_ids.size(); ++i) ids.set(i, grant.gpu_ids[i]);
  Answer(client, request_id, out);
}

void LeaseReplies::Refuse(ClientId client, uint64_t request_id, const std::string& why) {
  OutMessage out;
  auto reply = InitReply(out, request_id);
  reply.setGranted(false);
  reply.setError(why);
  Answer(client, request_id, out);
}

void LeaseReplies::Spillback(ClientId client, uint64_t request_id, const std::string& node_id) {
  OutMessage out;
  auto reply = InitReply(out, request_id);
  reply.setGranted(false);
  reply.setSpillbackNode(BytesOf(node_id));
  reply.setSpillbackAddress(cluster_.AddressOf(node_id));
  Answer(client, request_id, out);
}

void LeaseReplies::Retry(ClientId client, uint64_t request_id) {
  OutMessage out;
  InitReply(out, request_id).setRetry(true);
  Answer(client, request_id, out);
}

void LeaseReplies::Waiting(ClientId client, uint64_t request_id, const std::string& why) {
  OutMessage out;
  auto reply = InitReply(out, request_id);
  reply.setWaiting(true);
  reply.setError(why);
  clients_.Send(client, out.builder());
}

void LeaseReplies::Answer(ClientId client, uint64_t request_id, OutMessage& out) {
  keyed_.OnReply(client, request_id, out.builder());  // kept for a keyed request's repeats
  clients_.Send(client, out.builder());
}

void LeaseReplies::Reclaim(ClientId holder) {
  OutMessage out;
  out.Init().setReclaimLeases();
  clients_.Send(holder, out.builder());
}

}  // namespace lumen::node
