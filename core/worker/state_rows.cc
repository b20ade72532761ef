// CoreWorker: the `lumen list actors|tasks|objects` and `lumen memory` rows
// of what this process owns, answered to its node daemon. io thread.
#include "lumen/worker/core_worker.h"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/worker/normal_task_submitter.h"
#include "core/worker/task_manager.h"
#include "core/worker/worker_state.h"
#include "lumen/common/format_bytes.h"
#include "lumen/common/memory_listing.h"
#include "lumen/common/proto_util.h"

namespace lumen::runtime {

void CoreWorker::SendStateRows(Connection& conn, uint64_t request_id, const std::string& what) {
  io_checker_.Check("CoreWorker::SendStateRows");
  std::vector<std::vector<std::pair<std::string, std::string>>> rows;
  std::string owner = absl::StrCat(options_.is_worker ? "worker " : "driver ", ::getpid());
  auto short_id = [](const std::string& hex) { return hex.substr(0, 16); };
  if (what == "actors") {
    actor_owner_->ForEach([&](const actors::OwnedActor& actor) {
      const actors::WorkerPlacement& where = actor.placement;
      rows.push_back({{"ACTOR_ID", short_id(actor.spec->id.Hex())},
                      {"CLASS", actor.spec->factory},
                      {"STATE", actors::ActorStateName(actor.life.state())},
                      {"NAME", actor.spec->name},
                      {"NODE", where.node_id.IsNil() ? "" : short_id(where.node_id.Hex())},
                      {"PID", where.pid ? std::to_string(where.pid) : ""},
                      {"RESTARTS", std::to_string(actor.life.restarts())},
                      {"OWNER", owner}});
    });
  } else if (what == "tasks") {
    submitter_->ForEachTask([&](const PendingTask& task, const NodeId* node, int worker_pid) {
      rows.push_back({{"TASK_ID", short_id(task.task_id.Hex())},
                      {"NAME", task.name()},
                      {"STATE", node ? "RUNNING" : "PENDING_NODE_ASSIGNMENT"},
                      {"NODE", node ? short_id(node->Hex()) : ""},
                      {"OWNER", owner},
                      {"WORKER_PID", worker_pid ? std::to_string(worker_pid) : ""}});
    });
    actor_submitter_->ForEachCall([&](const actors::ActorCall& call, bool in_flight) {
      const auto& task = static_cast<const PendingTask&>(call);
      rows.push_back({{"TASK_ID", short_id(task.task_id.Hex())},
                      {"NAME", task.name()},
                      {"STATE", in_flight ? "RUNNING" : "PENDING_ACTOR"},
                      {"NODE", ""},
                      {"OWNER", owner},
                      {"WORKER_PID", ""}});
    });
    for (const auto& f : tasks_->finished()) {
      rows.push_back({{"TASK_ID", short_id(f.id.Hex())},
                      {"NAME", f.name},
                      {"STATE", f.state},
                      {"NODE", ""},
                      {"OWNER", owner},
                      {"WORKER_PID", ""}});
    }
  } else if (std::optional<size_t> top = ParseMemoryListing(what)) {
    // `lumen memory`: the owner's side of its `top` largest stored objects
    // (the stores list theirs; the command line joins them by id).
    struct Owned {
      const ObjectId* id;
      const ObjectEntry* e;
    };
    auto larger = [](const Owned& a, const Owned& b) {
      return a.e->stored_size != b.e->stored_size ? a.e->stored_size > b.e->stored_size
                                                  : *a.id < *b.id;
    };
    ObjectTable::Locked objects(*object_table_);
    std::vector<Owned> heap;  // min-heap by `larger`: its front goes first
    for (const auto& [id, e] : *objects) {
      if (!e.owned || e.is_actor || !e.ready || e.kind != ObjectEntry::Kind::kStored) continue;
      Owned o{&id, &e};
      if (heap.size() == *top) {
        if (*top == 0 || !larger(o, heap.front())) continue;
        std::pop_heap(heap.begin(), heap.end(), larger);
        heap.pop_back();
      }
      heap.push_back(o);
      std::push_heap(heap.begin(), heap.end(), larger);
    }
    std::sort_heap(heap.begin(), heap.end(), larger);
    std::string owner_node = node_id_.Hex().substr(0, 12);
    for (const Owned& o : heap) {
      rows.push_back({{"KIND", "owner"},
                      {"OBJECT_ID", o.id->Hex()},
                      {"SIZE", absl::StrCat(o.e->stored_size)},
                      {"OWNER", absl::StrCat(owner, " @ ", owner_node)},
                      {"CALL_SITE", o.e->call_site ? *o.e->call_site : "(unknown)"},
                      {"LOCAL_REFS", absl::StrCat(o.e->local_refs)},
                      {"BORROWERS", absl::StrCat(o.e->borrowers)},
                      {"IN_FLIGHT", absl::StrCat(o.e->pending_escapes)}});
    }
  } else if (what == "objects") {
    ObjectTable::Locked objects(*object_table_);
    for (const auto& [id, e] : *objects) {
      if (!e.owned || e.is_actor) continue;
      std::string where;
      for (const auto& [node, address] : e.locations) {
        absl::StrAppend(&where, where.empty() ? "" : ",", node.Hex().substr(0, 12));
      }
      const char* kind = !e.ready ? "PENDING"
                         : e.kind == ObjectEntry::Kind::kInline ? "INLINE"
                         : e.kind == ObjectEntry::Kind::kStored ? "STORED"
                                                                : "FAILED";
      uint64_t size = e.kind == ObjectEntry::Kind::kStored ? e.stored_size
                      : e.value                            ? e.value->size()
                                                           : 0;
      rows.push_back({{"OBJECT_ID", short_id(id.Hex())},
                      {"STATE", kind},
                      {"SIZE", e.ready ? FormatBytes(size) : ""},
                      {"COPIES_ON", where},
                      {"REFS", absl::StrCat(e.local_refs, " local, ", e.borrowers, " borrowers")},
                      {"OWNER", owner}});
    }
  }
  capnp::MallocMessageBuilder out;
  auto env = out.initRoot<proto::Envelope>();
  env.setRequestId(request_id);
  auto list = env.initStateRows(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    auto fields = list[i].initFields(rows[i].size());
    for (size_t j = 0; j < rows[i].size(); ++j) {
      fields[j].setKey(rows[i][j].first);
      fields[j].setValue(BytesOf(rows[i][j].second));
    }
  }
  conn.Send(out);
}

}  // namespace lumen::runtime
