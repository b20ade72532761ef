#include "lumen/objectstore/pull_manager.h"

#include "lumen/common/logging.h"
#include "lumen/common/task_events.h"

namespace lumen::objectstore {
namespace {

int64_t SteadyMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

PullManager::PullManager(StoreServer& store, TransferClient& transfer, SourceLookup lookup,
                         Later later, Retry retry)
    : store_(store),
      transfer_(transfer),
      lookup_(std::move(lookup)),
      later_(std::move(later)),
      retry_(retry) {}

void PullManager::AnswerAll(std::vector<Answer>& readers, const absl::Status& status) {
  // Readers learn "unavailable" for every failed copy, with its cause.
  absl::Status answer =
      status.ok() ? status : absl::UnavailableError(std::string(status.message()));
  for (auto& reader : readers) reader(answer);
  readers.clear();
}

void PullManager::Pull(const ObjectId& id, const std::string& source_node, uint64_t size,
                       const JobId& job, Answer answer) {
  io_thread_.Check("PullManager");
  auto pending = pulls_.find(id);
  if (pending != pulls_.end()) {
    if (!pending->second.answered) {
      pending->second.readers.push_back(std::move(answer));
    } else {
      answer(absl::UnavailableError("its source node died during the copy"));
    }
    return;
  }
  if (store_.IsSealed(id)) {
    answer(absl::OkStatus());
    return;
  }
  auto source = lookup_(source_node);
  if (!source.ok()) {
    answer(source.status());
    return;
  }
  InFlight& entry = pulls_[id];
  entry.source = source_node;
  entry.address = *source;
  entry.job = job;
  entry.readers.push_back(std::move(answer));
  entry.size = size;
  entry.started_us = TaskEventRecorder::NowMicros();
  entry.first_try_us = SteadyMicros();
  Start(id);
}

void PullManager::Start(const ObjectId& id) {
  auto it = pulls_.find(id);
  if (it == pulls_.end()) return;
  store_.BeginPullIn(id, it->second.size, it->second.job, [this, id](absl::StatusOr<uint8_t*> dest) {
    if (stopped_) return;
    auto it = pulls_.find(id);
    if (it == pulls_.end()) {  // cannot happen: the entry lives until Finish
      if (dest.ok()) store_.AbortPulledIn(id);
      return;
    }
    if (!dest.ok() || it->second.answered) {
      if (dest.ok()) store_.AbortPulledIn(id);
      std::vector<Answer> readers = std::move(it->second.readers);
      pulls_.erase(it);
      AnswerAll(readers, dest.ok() ? absl::UnavailableError("its source node died") : dest.status());
      return;
    }
    transfer_.Pull(it->second.address, id, it->second.size, *dest,
                   [this, id](absl::Status status) { Finish(id, std::move(status)); });
  });
}

void PullManager::OnNodeDied(const std::string& node, const std::string& why) {
  io_thread_.Check("PullManager");
  for (auto& [object, pull] : pulls_) {
    if (pull.source != node || pull.answered) continue;
    pull.answered = true;
    AnswerAll(pull.readers, absl::UnavailableError(why));
  }
}

void PullManager::Finish(const ObjectId& id, absl::Status status) {
  if (stopped_) return;
  io_thread_.Check("PullManager");
  auto it = pulls_.find(id);
  if (it == pulls_.end()) return;
  if (status.code() == absl::StatusCode::kAborted && !it->second.answered &&
      SteadyMicros() - it->second.first_try_us <
          std::chrono::duration_cast<std::chrono::microseconds>(retry_.limit).count()) {
    // The source is restoring it from disk: give the memory back meanwhile
    // (it may be needed to make room here) and ask again shortly.
    store_.AbortPulledIn(id);
    later_(retry_.delay, [this, id] {
      if (!stopped_) Start(id);
    });
    return;
  }
  if (status.ok() && !it->second.answered) {
    status = store_.SealPulledIn(id);
  } else {
    // Its memory is free again only now that nothing writes into it.
    store_.AbortPulledIn(id);
    if (!status.ok()) LUMEN_LOG(WARNING) << "pulling object " << id.Hex() << " failed: " << status;
    if (status.ok()) status = absl::UnavailableError("its source node died during the copy");
  }
  if (status.ok()) {
    TaskEvent pulled{.kind = TaskEventKind::kPull, .name = id.Hex(),
                     .node = NodeId::FromBinary(it->second.source), .bytes = it->second.size};
    pulled.duration_us = TaskEventRecorder::NowMicros() - it->second.started_us;
    TaskEvents().RecordEvent(std::move(pulled));
  }
  std::vector<Answer> readers = std::move(it->second.readers);
  pulls_.erase(it);
  AnswerAll(readers, status);
}

}  // namespace lumen::objectstore
