#include "core/worker/head_requester.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "lumen/common/address.h"
#include "lumen/common/backoff.h"
#include "lumen/common/head_client.h"
#include "lumen/common/post.h"

namespace lumen::runtime {

struct HeadRequester::Pending {
  explicit Pending(const HeadReconnect& r)
      : reconnect(r),
        backoff({.initial = r.initial,
                 .max = std::max<std::chrono::milliseconds>(r.initial, std::chrono::seconds(2)),
                 .give_up_after = r.give_up_after}) {}
  HeadReconnect reconnect;  // as set when the call began
  Backoff backoff;          // started when an attempt lost the head
  uint64_t attempt = 0;     // attempts started; a late callback of an older one is ignored
  std::function<void(proto::Envelope::Builder)> fill;
  ReplyCallback done;
  std::unique_ptr<boost::asio::steady_timer> timer;
  std::unique_ptr<boost::asio::ip::tcp::resolver> resolver;
  std::unique_ptr<boost::asio::ip::tcp::socket> socket;
  std::shared_ptr<Connection> conn;
};

HeadRequester::HeadRequester(boost::asio::io_context& io, Options options)
    : io_(io), options_(std::move(options)) {}

HeadRequester::~HeadRequester() = default;

void HeadRequester::Call(std::function<void(proto::Envelope::Builder)> fill,
                         ReplyCallback done) {
  io_thread_.Check("HeadRequester::Call");
  auto colon = options_.head_address.rfind(':');
  if (options_.head_address.empty() || colon == std::string::npos) {
    done(absl::FailedPreconditionError(
        absl::StrCat("no usable head address ('", options_.head_address, "')")));
    return;
  }
  uint64_t id = next_id_++;
  auto pending = std::make_unique<Pending>(GetHeadReconnect());
  pending->fill = std::move(fill);
  pending->done = std::move(done);
  pending->timer = std::make_unique<boost::asio::steady_timer>(io_);
  pending_[id] = std::move(pending);
  Attempt(id);
}

void HeadRequester::Attempt(uint64_t id) {
  Pending& p = *pending_.at(id);
  ++p.attempt;
  const auto colon = options_.head_address.rfind(':');
  // Each attempt has the whole deadline (a head that accepts and stays silent).
  p.timer->expires_after(options_.deadline);
  p.timer->async_wait([this, id](const boost::system::error_code& ec) {
    if (ec) return;
    Finish(id, absl::DeadlineExceededError(absl::StrCat(
                   "the head at ", options_.head_address, " did not answer within ",
                   options_.deadline.count(), " ms")));
  });
  p.resolver = std::make_unique<boost::asio::ip::tcp::resolver>(io_);
  auto* resolver = p.resolver.get();
  resolver->async_resolve(
      options_.head_address.substr(0, colon), options_.head_address.substr(colon + 1),
      [this, id](const boost::system::error_code& ec,
                 boost::asio::ip::tcp::resolver::results_type results) {
        auto it = pending_.find(id);
        if (it == pending_.end()) return;
        if (ec) {
          Finish(id, absl::UnavailableError(absl::StrCat(
                         "cannot resolve the head at ", options_.head_address, ": ",
                         ec.message())));
          return;
        }
        it->second->socket = std::make_unique<boost::asio::ip::tcp::socket>(io_);
        boost::asio::async_connect(
            *it->second->socket, results,
            [this, id, attempt = it->second->attempt](const boost::system::error_code& ec,
                                                      const boost::asio::ip::tcp::endpoint&) {
              auto p = pending_.find(id);
              if (p == pending_.end() || p->second->attempt != attempt) return;
              if (ec) {
                Lost(id, absl::UnavailableError(absl::StrCat(
                             "cannot reach the head at ", options_.head_address, ": ",
                             ec.message())));
                return;
              }
              OnConnected(id);
            });
      });
}

void HeadRequester::OnConnected(uint64_t id) {
  Pending& p = *pending_.at(id);
  const uint64_t attempt = p.attempt;
  p.conn = Connection::Create(AdoptTcp(io_, std::move(*p.socket)));
  p.socket.reset();
  p.conn->Start([this, id](Connection&, proto::Envelope::Reader msg) { Finish(id, msg); },
                [this, id, attempt](Connection&, const absl::Status& why) {
                  auto it = pending_.find(id);
                  if (it == pending_.end() || it->second->attempt != attempt) return;
                  Lost(id, absl::UnavailableError(absl::StrCat(
                               "the head at ", options_.head_address,
                               " closed the connection: ", why.message())));
                });
  {
    OutMessage out;
    InitHello(out.Init(), proto::Role::CLI);
    p.conn->Send(out.builder());
  }
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(1);
  p.fill(env);
  p.conn->Send(out.builder());
}

void HeadRequester::Lost(uint64_t id, absl::Status why) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  Pending& p = *it->second;
  const auto now = std::chrono::steady_clock::now();
  if (p.reconnect.give_up_after.count() <= 0) return Finish(id, std::move(why));
  p.backoff.Start(now);
  if (!p.reconnect.head_persistent || p.backoff.Expired(now)) {
    return Finish(id, HeadLostError(options_.head_address, p.reconnect, p.backoff.Elapsed(now),
                                    why));
  }
  // Drop this attempt's socket (later), then try again after the backoff.
  if (p.conn) {
    std::shared_ptr<Connection> old = std::move(p.conn);
    old->Close(absl::CancelledError("head lost; retrying"));
    lumen::Post(io_, "worker.release_head_attempt", [old] {});
  }
  boost::system::error_code ignored;
  if (p.socket) p.socket->close(ignored);
  p.timer->expires_after(p.backoff.NextDelay());
  p.timer->async_wait([this, id](const boost::system::error_code& ec) {
    if (!ec && pending_.contains(id)) Attempt(id);
  });
}

void HeadRequester::Finish(uint64_t id, absl::StatusOr<proto::Envelope::Reader> reply) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  std::shared_ptr<Pending> p(std::move(it->second));
  pending_.erase(it);
  p->timer->cancel();
  if (p->resolver) p->resolver->cancel();
  boost::system::error_code ignored;
  if (p->socket) p->socket->close(ignored);
  auto done = std::move(p->done);
  done(std::move(reply));
  if (p->conn) p->conn->Close(absl::CancelledError("head request done"));
  // Its handlers may still be on the stack (a reply, a close): free it later.
  lumen::Post(io_, "worker.release_head_request", [p] {});
  if (pending_.empty()) {
    auto waiters = std::move(idle_waiters_);
    idle_waiters_.clear();
    for (auto& waiter : waiters) waiter();
  }
}

void HeadRequester::WhenIdle(std::function<void()> done) {
  io_thread_.Check("HeadRequester::WhenIdle");
  if (pending_.empty()) {
    done();
    return;
  }
  idle_waiters_.push_back(std::move(done));
}

void HeadRequester::CancelAll() {
  io_thread_.Check("HeadRequester::CancelAll");
  std::vector<uint64_t> ids;
  for (const auto& [id, p] : pending_) ids.push_back(id);
  for (uint64_t id : ids) Finish(id, absl::CancelledError("shutting down"));
}

}  // namespace lumen::runtime
