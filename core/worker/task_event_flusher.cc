#include "core/worker/task_event_flusher.h"

#include <string>
#include <utility>
#include <vector>

#include "lumen/common/task_event_wire.h"

namespace lumen::runtime {

TaskEventFlusher::TaskEventFlusher(boost::asio::io_context& io, TaskEventRecorder& recorder,
                                   std::chrono::milliseconds period,
                                   std::weak_ptr<Connection> node)
    : recorder_(recorder), period_(period), node_(std::move(node)), timer_(io) {}

void TaskEventFlusher::Start() {
  io_thread_.Check("TaskEventFlusher::Start");
  if (!recorder_.enabled()) return;
  Arm();
}

void TaskEventFlusher::Arm() {
  timer_.expires_after(period_);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    FlushNow();
    Arm();
  });
}

std::string TaskEventFlusher::TakeFrame(uint64_t request_id) {
  records_.clear();  // keeps its capacity from the last flush
  size_t count = recorder_.DrainPacked(&records_);
  uint64_t dropped = recorder_.dropped();
  if (count == 0 && dropped == reported_dropped_ && request_id == 0) return {};
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  auto batch = env.initTaskEvents();
  SetPackedEvents(records_, batch);
  batch.setDropped(dropped - reported_dropped_);
  reported_dropped_ = dropped;
  std::string frame;
  AppendFrame(out.builder(), &frame);
  return frame;
}

void TaskEventFlusher::FlushNow() {
  io_thread_.Check("TaskEventFlusher::FlushNow");
  auto node = node_.lock();
  if (!node || node->closed()) return;
  std::string frame = TakeFrame();
  if (!frame.empty()) node->SendFramed(frame);
}

void TaskEventFlusher::AnswerFlush(uint64_t request_id) {
  io_thread_.Check("TaskEventFlusher::AnswerFlush");
  auto node = node_.lock();
  if (!node || node->closed()) return;
  node->SendFramed(TakeFrame(request_id));
}

void TaskEventFlusher::FlushBeforeClose() {
  io_thread_.Check("TaskEventFlusher::FlushBeforeClose");
  stopped_ = true;
  timer_.cancel();
  auto node = node_.lock();
  if (!node || node->closed() || !recorder_.enabled() || !node->idle()) return;
  std::string frame = TakeFrame();
  // Best effort: what does not go out in one non-blocking send is lost with
  // the connection.
  if (!frame.empty()) node->TrySendNow(frame);
}

}  // namespace lumen::runtime
