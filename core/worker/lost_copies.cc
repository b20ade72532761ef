// LostCopies: a reader's report of an unreadable copy, and its owner's answer
// (lost_copies.h, doc/reliability.md item 4).
#include "core/worker/lost_copies.h"

#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/worker/io_poster.h"
#include "core/worker/object_recovery.h"
#include "core/worker/object_table.h"
#include "core/worker/object_value.h"
#include "core/worker/outbound_connections.h"
#include "lumen/common/codec.h"
#include "lumen/common/logging.h"
#include "lumen/common/proto_util.h"

namespace lumen::runtime {

LostCopies::LostCopies(ObjectTable& table, ObjectRecovery& recovery,
                       OutboundConnections& connections, IoPoster& poster, Options options,
                       std::function<bool()> stopping)
    : table_(table),
      recovery_(recovery),
      connections_(connections),
      poster_(poster),
      options_(std::move(options)),
      stopping_(std::move(stopping)) {}

void LostCopies::OnCopyUnreadable(const ObjectId& id, const NodeId& node, const std::string& why) {
  io_thread_.Check("LostCopies::OnCopyUnreadable");
  bool lost = false;
  {
    ObjectTable::Locked objects(table_);
    auto it = objects->find(id);
    // Pending (being rebuilt already), failed, inline or freed: nothing to do.
    if (it == objects->end() || !it->second.owned || !it->second.ready ||
        it->second.kind != ObjectEntry::Kind::kStored) {
      return;
    }
    auto& copies = it->second.locations;
    const size_t before = copies.size();
    std::erase_if(copies, [&](const auto& copy) { return copy.first == node; });
    lost = copies.empty() && before > 0;
  }
  if (!lost) return;
  LUMEN_LOG(INFO) << "object " << id.Hex().substr(0, 12) << ": its last copy, on node "
                  << node.Hex().substr(0, 12) << ", could not be read (" << why
                  << "); rebuilding it from its lineage";
  recovery_.OnLost({id},
                    absl::StrCat("its only copy, on node ", node.Hex(),
                                 ", could not be read (", why, ")"),
                    node);
}

absl::StatusOr<RecoveredCopy> LostCopies::RecoverFromOwner(const ObjectId& id,
                                                           const std::string& owner,
                                                           const NodeId& node,
                                                           const std::string& why) {
  // Where an owner's objectStatus says the object is; DataLoss with its
  // failure's message when it failed.
  auto copy_from = [](proto::Value::Reader value) -> absl::StatusOr<RecoveredCopy> {
    RecoveredCopy copy;
    switch (value.which()) {
      case proto::Value::INLINE: {
        auto data = value.getInline();
        copy.inline_value = std::make_shared<const std::string>(
            reinterpret_cast<const char*>(data.begin()), data.size());
        return copy;
      }
      case proto::Value::STORED: {
        auto stored = value.getStored();
        copy.node = IdFrom<NodeId>(stored.getNodeId());
        copy.node_address = stored.getNodeAddress().cStr();
        copy.size = stored.getSize();
        return copy;
      }
      case proto::Value::ERROR:
        break;
    }
    return absl::DataLossError(value.getError().getMessage().cStr());
  };
  // The answer, filled once on the io thread; shared so that a reader that
  // gives up (the runtime stops) leaves nothing dangling.
  struct Answer {
    absl::Notification done;
    absl::StatusOr<RecoveredCopy> copy = absl::UnavailableError("no answer");
  };
  auto answer = std::make_shared<Answer>();
  auto finish = [answer](absl::StatusOr<RecoveredCopy> copy) {
    if (answer->done.HasBeenNotified()) return;
    answer->copy = std::move(copy);
    answer->done.Notify();
  };
  bool posted = poster_.Post("worker.recover_lost_copy", [this, id, owner, node, why, finish,
                                                          copy_from] {
    io_thread_.Check("LostCopies::RecoverFromOwner");
    if (owner == options_.listen_address) {
      // Ours: forget the copy (maybe rebuild), then answer once it is ready.
      OnCopyUnreadable(id, node, why);
      auto answer_now = [this, id, finish, copy_from] {
        capnp::MallocMessageBuilder message;
        auto value = message.initRoot<proto::Value>();
        {
          ObjectTable::Locked objects(table_);
          auto it = objects->find(id);
          if (it == objects->end()) {
            finish(absl::DataLossError(absl::StrCat("object ", id.Hex(), " was freed")));
            return;
          }
          FillValue(value, it->second, options_.listen_address);
        }
        finish(copy_from(value.asReader()));
      };
      bool ready = true;
      {
        ObjectTable::Locked objects(table_);
        auto it = objects->find(id);
        if (it != objects->end() && !it->second.ready) {
          ready = false;
          it->second.on_ready.push_back(answer_now);
        }
      }
      if (ready) answer_now();
      return;
    }
    connections_.WithPeer(owner, [this, id, node, why, finish, copy_from](
                                      absl::StatusOr<std::shared_ptr<Connection>> conn) {
      if (!conn.ok()) {
        finish(absl::UnavailableError(absl::StrCat("its owner is unreachable (it died): ",
                                                   conn.status().message())));
        return;
      }
      connections_.SendPeerRequest(
          **conn,
          [&](proto::Envelope::Builder env) {
            auto req = env.initRecoverObject();
            req.setObjectId(DataOf(id));
            req.setNodeId(DataOf(node));
            req.setError(why);
          },
          [finish, copy_from](proto::Envelope::Reader msg) {
            if (!msg.isObjectStatus()) {
              finish(absl::UnavailableError("its owner died before it answered"));
              return;
            }
            finish(copy_from(msg.getObjectStatus().getValue()));
          });
    });
  });
  if (!posted) return absl::CancelledError("the runtime is shutting down");
  // The owner answers once the object is rebuilt (bounded by its task's
  // retries) or failed, or its connection closes; we stop waiting when the
  // runtime stops.
  while (!answer->done.WaitForNotificationWithTimeout(absl::Milliseconds(200))) {
    if (stopping_()) return absl::CancelledError("the runtime is shutting down");
  }
  return answer->copy;
}

}  // namespace lumen::runtime
