#include "core/node/worker_event_flush.h"

#include "lumen/common/connection.h"

namespace lumen::node {

void WorkerEventFlush::Start(const std::vector<uint64_t>& worker_conns,
                             std::function<void()> done) {
  uint64_t id = next_id_++;
  size_t asked = 0;
  for (uint64_t conn_id : worker_conns) {
    Connection* conn = clients_.Find(conn_id);
    if (conn == nullptr || conn->closed()) continue;
    OutMessage out;
    auto env = out.Init();
    env.setRequestId(id);
    env.setGetTaskEvents();
    conn->Send(out.builder());
    ++asked;
  }
  if (asked == 0) {
    done();
    return;
  }
  Pending& p = pending_[id];
  p.left = asked;
  p.done = std::move(done);
  p.deadline = std::make_unique<boost::asio::steady_timer>(io_, timeout_);
  p.deadline->async_wait([this, id](const boost::system::error_code& ec) {
    if (!ec) Finish(id);
  });
}

void WorkerEventFlush::OnAnswer(uint64_t request_id) {
  auto it = pending_.find(request_id);
  if (it == pending_.end()) return;
  if (--it->second.left == 0) Finish(request_id);
}

void WorkerEventFlush::Finish(uint64_t id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  std::function<void()> done = std::move(it->second.done);
  // Destroying the timer cancels its wait; the handler then finds no entry.
  pending_.erase(it);
  done();
}

}  // namespace lumen::node
