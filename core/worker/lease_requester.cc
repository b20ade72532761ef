#include "core/worker/lease_requester.h"

#include "absl/strings/str_cat.h"
#include "lumen/common/logging.h"
#include "lumen/common/proto_util.h"

namespace lumen::runtime {

void LeaseRequester::Refuse(const Callback& done, const std::string& why) {
  capnp::MallocMessageBuilder message;
  auto reply = message.initRoot<proto::LeaseReply>();
  reply.setGranted(false);
  reply.setError(why);
  done(reply.asReader(), nullptr);
}

void LeaseRequester::Acquire(const LeaseShape& shape, Callback done, std::string target,
                             int attempt) {
  io_thread_.Check("LeaseRequester::Acquire");
  auto pending = std::make_shared<Attempt>(Attempt{shape, std::move(done), target, attempt, {}});
  transport_.SendLeaseRequest(
      target, shape, /*grant_or_reject=*/!target.empty(),
      [this, pending](proto::Envelope::Reader msg) { return OnReply(pending, msg); },
      [this, pending](absl::StatusOr<std::shared_ptr<Connection>> node) {
        OnSent(pending, std::move(node));
      });
}

void LeaseRequester::OnSent(const std::shared_ptr<Attempt>& pending,
                            absl::StatusOr<std::shared_ptr<Connection>> node) {
  io_thread_.Check("LeaseRequester::OnSent");
  if (node.ok()) {
    pending->node = std::move(*node);
    return;
  }
  if (node.status().code() == absl::StatusCode::kCancelled) return;  // shutting down
  const absl::Status& error = node.status();
  const std::string& target = pending->target;
  if (!target.empty() && pending->attempt < options_.max_attempts &&
      transport_.LocalNodeConnected()) {
    // The node we were sent to is gone: ask ours again, once its view catches up.
    transport_.After(options_.spillback_retry_delay, [this, pending] {
      Acquire(pending->shape, std::move(pending->done), "", pending->attempt + 1);
    });
    return;
  }
  Refuse(pending->done, target.empty()
                            ? std::string("lost the connection to the node daemon")
                            : absl::StrCat("cannot reach node ", target, ": ", error.message()));
}

bool LeaseRequester::OnReply(const std::shared_ptr<Attempt>& pending, proto::Envelope::Reader msg) {
  if (!pending->done) return false;  // answered already
  if (!msg.isLeaseReply()) {
    // The node went away before answering: ours is gone for good, another
    // node's means asking ours again.
    if (!pending->target.empty()) {
      Acquire(pending->shape, std::move(pending->done), "", pending->attempt + 1);
    } else {
      Refuse(pending->done, "lost the connection to the node daemon");
    }
    pending->done = nullptr;
    return false;
  }
  auto reply = msg.getLeaseReply();
  if (reply.getWaiting()) {
    // Not an answer: nothing in the cluster can run it yet. Say so once per shape.
    if (!warned_infeasible_[pending->shape.name]) {
      warned_infeasible_[pending->shape.name] = true;
      LUMEN_LOG(WARNING) << reply.getError().cStr();
    }
    return true;
  }
  Callback done = std::move(pending->done);
  pending->done = nullptr;
  bool more = reply.getSpillbackAddress().size() > 0 || reply.getRetry();
  if (more && pending->attempt >= options_.max_attempts) {
    Refuse(done, absl::StrCat("no node granted a worker for ", pending->shape.name, " after ",
                              options_.max_attempts, " spillbacks and retries"));
    return false;
  }
  if (reply.getSpillbackAddress().size() > 0) {
    std::string address = reply.getSpillbackAddress().cStr();
    transport_.OnSpillback(address, IdFrom<NodeId>(reply.getSpillbackNode()));
    Acquire(pending->shape, std::move(done), address, pending->attempt + 1);
    return false;
  }
  if (reply.getRetry()) {
    transport_.After(options_.retry_delay,
                     [this, shape = pending->shape, done = std::move(done),
                      attempt = pending->attempt]() mutable {
                       Acquire(shape, std::move(done), "", attempt + 1);
                     });
    return false;
  }
  done(reply, reply.getGranted() ? pending->node : nullptr);
  return false;
}

}  // namespace lumen::runtime
