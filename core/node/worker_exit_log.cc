#include "core/node/worker_exit_log.h"

#include "lumen/common/proto_util.h"

namespace lumen::node {

void WorkerExitLog::Forget(uint64_t client) {
  auto count = waiters_per_client_.find(client);
  if (count != waiters_per_client_.end() && --count->second == 0) {
    waiters_per_client_.erase(count);
  }
}

void WorkerExitLog::Record(const WorkerId& id, WorkerExit exit) {
  io_thread_.Check("WorkerExitLog");
  auto waiters = waiters_.extract(id);
  if (!waiters.empty()) {
    for (auto& waiter : waiters.mapped()) {
      waiter.timer->cancel();
      Forget(waiter.client);
      waiter.answer(&exit);
    }
  }
  if (recent_.size() >= kMaxRecentExits && !recent_order_.empty()) {
    recent_.erase(recent_order_.front());
    recent_order_.pop_front();
  }
  if (recent_.insert_or_assign(id, std::move(exit)).second) recent_order_.push_back(id);
}

void WorkerExitLog::Ask(const WorkerId& id, const JobId& job, uint64_t client, bool running,
                        std::chrono::milliseconds timeout, Answer answer) {
  io_thread_.Check("WorkerExitLog");
  // Only processes of the worker's own job learn how it ended.
  if (auto it = recent_.find(id); it != recent_.end()) {
    answer(it->second.job == job ? &it->second : nullptr);
    return;
  }
  size_t& pending = waiters_per_client_[client];
  if (!running || pending >= kMaxWaitersPerClient || timeout.count() == 0) {
    if (pending == 0) waiters_per_client_.erase(client);
    answer(nullptr);
    return;
  }
  // Still running (its socket closes before it is reaped): answer when it is,
  // or at the deadline.
  ++pending;
  uint64_t serial = next_serial_++;
  auto timer = std::make_shared<boost::asio::steady_timer>(io_, std::min(timeout, max_wait_));
  waiters_[id].push_back(Waiter{client, serial, std::move(answer), timer});
  timer->async_wait([this, id, serial, client](const boost::system::error_code& ec) {
    if (ec) return;  // answered
    auto wit = waiters_.find(id);
    if (wit == waiters_.end()) return;
    auto& list = wit->second;
    for (auto it = list.begin(); it != list.end(); ++it) {
      if (it->serial != serial) continue;
      Answer late = std::move(it->answer);
      list.erase(it);
      if (list.empty()) waiters_.erase(wit);
      Forget(client);
      late(nullptr);
      return;
    }
  });
}

void FillWorkerExitInfo(const NodeId& node, const WorkerExit* exit,
                        proto::WorkerExitInfo::Builder info) {
  info.setNodeId(DataOf(node));
  info.setKnown(exit != nullptr);
  info.setExitCode(-1);
  if (exit != nullptr) {
    info.setPid(exit->pid);
    info.setCause(exit->cause);
    info.setSignal(exit->signal);
    info.setExitCode(exit->exit_code);
  }
}

}  // namespace lumen::node
