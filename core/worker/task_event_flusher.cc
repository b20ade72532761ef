#include "core/worker/task_event_flusher.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "lumen/common/logging.h"
#include "lumen/common/task_event_packed.h"
#include "lumen/common/task_event_wire.h"

namespace lumen::runtime {

TaskEventFlusher::TaskEventFlusher(boost::asio::io_context& io, TaskEventRecorder& recorder,
                                   std::chrono::milliseconds period,
                                   std::weak_ptr<Connection> node)
    : recorder_(recorder), period_(period), node_(std::move(node)), timer_(io) {}

TaskEventFlusher::~TaskEventFlusher() {
  if (!stopped_) recorder_.ClearFillSignal();
}

void TaskEventFlusher::Start() {
  io_thread_.Check("TaskEventFlusher::Start");
  if (!recorder_.enabled()) return;
  // The period alone left a busy process's first period (a second) unflushed:
  // its rings grew to tens of MiB of slots and dropped events.
  recorder_.SetFillSignal(kTargetRecords, [this] {
    if (early_flush_posted_.exchange(true)) return;
    boost::asio::post(timer_.get_executor(), [this] {
      early_flush_posted_ = false;
      if (!stopped_) FlushNow();
    });
  });
  Arm();
}

void TaskEventFlusher::Arm() {
  timer_.expires_after(NextDelay());
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    FlushNow();
    Arm();
  });
}

std::chrono::steady_clock::duration TaskEventFlusher::NextDelay() const {
  using Duration = std::chrono::steady_clock::duration;
  const Duration period = period_, min_period = kMinPeriod;
  if (last_interval_ == Duration::zero()) return period;
  // Busy: the interval that would have held kTargetRecords. Quieter: back
  // towards `period` by doubling (a jump would fill the rings in one period).
  Duration next = last_count_ > kTargetRecords
                      ? last_interval_ * static_cast<int64_t>(kTargetRecords) / static_cast<int64_t>(last_count_)
                      : last_interval_ * 2;
  return std::clamp(next, std::min(min_period, period), period);
}

bool TaskEventFlusher::TakeMessage(OutMessage& out, uint64_t request_id) {
  records_.assign(1, static_cast<char>(packed_events::kVersion));  // keeps its capacity
  if (before_drain_ && recorder_.enabled()) before_drain_();
  size_t count = recorder_.DrainPacked(&records_);
  last_count_ = count;
  uint64_t dropped = recorder_.dropped();
  if (count == 0 && dropped == reported_dropped_ && request_id == 0) return false;
  auto env = out.Init();
  env.setRequestId(request_id);
  auto batch = env.initTaskEvents();
  ReferencePackedBlob(&records_, batch);  // no copy: records_ outlives `out`
  batch.setDropped(dropped - reported_dropped_);
  reported_dropped_ = dropped;
  return true;
}

void TaskEventFlusher::FlushNow() {
  io_thread_.Check("TaskEventFlusher::FlushNow");
  auto node = node_.lock();
  if (!node || node->closed()) return;
  // Framed straight into the connection's queue: one copy of the records
  // fewer to pass through the io thread's caches (doc/observability.md, "Cost").
  OutMessage out;
  if (TakeMessage(out)) node->Send(out.builder());
  const auto now = std::chrono::steady_clock::now();
  if (last_flush_at_ != std::chrono::steady_clock::time_point()) last_interval_ = now - last_flush_at_;
  last_flush_at_ = now;
}

void TaskEventFlusher::AnswerFlush(uint64_t request_id) {
  io_thread_.Check("TaskEventFlusher::AnswerFlush");
  auto node = node_.lock();
  if (!node || node->closed()) return;
  OutMessage out;
  TakeMessage(out, request_id);  // an answer goes even with no events
  node->Send(out.builder());
}

void TaskEventFlusher::FlushBeforeClose() {
  io_thread_.Check("TaskEventFlusher::FlushBeforeClose");
  stopped_ = true;
  recorder_.ClearFillSignal();
  timer_.cancel();
  auto node = node_.lock();
  if (!node || node->closed() || !recorder_.enabled() || !node->idle()) return;
  OutMessage out;
  if (!TakeMessage(out)) return;
  // A busy process's last records are a few hundred KiB, more than one
  // non-blocking send takes: the node, which reads all the time, gets a moment
  // to take them whole. Past kCloseSendLimit they are lost with the connection.
  std::string frame;
  AppendFrame(out.builder(), &frame);
  if (!node->SendBeforeClose(frame, kCloseSendLimit)) {
    LUMEN_LOG(DEBUG) << "the last task events were not all sent to the node";
  }
}

}  // namespace lumen::runtime
