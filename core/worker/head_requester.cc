#include "core/worker/head_requester.h"

#include <algorithm>
#include <chrono>

#include <capnp/message.h>

#include "absl/strings/str_cat.h"
#include "lumen/common/address.h"
#include "lumen/common/backoff.h"
#include "lumen/common/control_retry.h"
#include "lumen/common/fault_injector.h"
#include "lumen/common/head_client.h"
#include "lumen/common/post.h"

namespace lumen::runtime {

struct HeadRequester::Pending {
  explicit Pending(const HeadReconnect& r)
      : reconnect(r),
        head_backoff({.initial = r.initial,
                      .max = std::max(r.initial, r.max),
                      .give_up_after = r.give_up_after}) {}
  HeadReconnect reconnect;  // as set when the call began
  Backoff head_backoff;     // started once the quick attempts are spent (the head is gone)
  std::string request;  // the framed request, the same bytes on every attempt but its attempt number
  std::unique_ptr<capnp::MallocMessageBuilder> message;
  bool resend_safe = false;  // SafeToResend: keyed, or changes nothing
  int attempt = 0;
  InjectedFault fault = InjectedFault::kNone;  // this attempt's
  ReplyCallback done;
  std::unique_ptr<boost::asio::steady_timer> timer;    // the call's deadline
  std::unique_ptr<boost::asio::steady_timer> backoff;  // before the next attempt
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
  pending->message = std::make_unique<capnp::MallocMessageBuilder>();
  auto env = pending->message->initRoot<proto::Envelope>();
  env.setRequestId(1);
  fill(env);
  SetRetryKey(env);
  pending->resend_safe = SafeToResend(env.asReader());
  pending->done = std::move(done);
  pending->timer = std::make_unique<boost::asio::steady_timer>(io_);
  pending_[id] = std::move(pending);
  StartAttempt(id);
}

HeadRequester::Pending* HeadRequester::Current(uint64_t id, int attempt) {
  auto it = pending_.find(id);
  if (it == pending_.end() || it->second->attempt != attempt) return nullptr;
  return it->second.get();
}

void HeadRequester::StartAttempt(uint64_t id) {
  Pending& p = *pending_.at(id);
  const int attempt = p.attempt;
  // Each attempt has the whole deadline: waiting out a head restart may take
  // longer than one (a head that accepts and stays silent still ends it).
  p.timer->expires_after(options_.deadline);
  p.timer->async_wait([this, id](const boost::system::error_code& ec) {
    if (ec) return;
    Finish(id, absl::DeadlineExceededError(absl::StrCat(
                   "the head at ", options_.head_address, " did not answer within ",
                   options_.deadline.count(), " ms")));
  });
  auto env = p.message->getRoot<proto::Envelope>();
  SetRetryAttempt(env, static_cast<uint32_t>(attempt));
  p.request.clear();
  AppendFrame(*p.message, &p.request);
  p.fault = FaultInjector::Draw(env.asReader());
  if (p.fault == InjectedFault::kFailBeforeSend) {
    Failed(id, attempt, absl::UnavailableError("injected fault: the request failed before it was sent"),
           /*sent=*/false);
    return;
  }
  auto colon = options_.head_address.rfind(':');
  p.resolver = std::make_unique<boost::asio::ip::tcp::resolver>(io_);
  p.resolver->async_resolve(
      options_.head_address.substr(0, colon), options_.head_address.substr(colon + 1),
      [this, id, attempt](const boost::system::error_code& ec,
                          boost::asio::ip::tcp::resolver::results_type results) {
        Pending* p = Current(id, attempt);
        if (p == nullptr) return;
        if (ec) {
          Failed(id, attempt,
                 absl::UnavailableError(absl::StrCat("cannot resolve the head at ",
                                                     options_.head_address, ": ", ec.message())),
                 false);
          return;
        }
        p->socket = std::make_unique<boost::asio::ip::tcp::socket>(io_);
        boost::asio::async_connect(
            *p->socket, results,
            [this, id, attempt](const boost::system::error_code& ec,
                                const boost::asio::ip::tcp::endpoint&) {
              if (Current(id, attempt) == nullptr) return;
              if (ec) {
                Failed(id, attempt,
                       absl::UnavailableError(absl::StrCat("cannot reach the head at ",
                                                           options_.head_address, ": ",
                                                           ec.message())),
                       false);
                return;
              }
              OnConnected(id, attempt);
            });
      });
}

void HeadRequester::OnConnected(uint64_t id, int attempt) {
  Pending& p = *pending_.at(id);
  p.conn = Connection::Create(AdoptTcp(io_, std::move(*p.socket)));
  p.socket.reset();
  p.conn->Start(
      [this, id, attempt](Connection&, proto::Envelope::Reader msg) {
        Pending* p = Current(id, attempt);
        if (p == nullptr) return;
        if (p->fault == InjectedFault::kDropReply) {
          Failed(id, attempt, absl::UnavailableError("injected fault: the head's reply was dropped"),
                 true);
          return;
        }
        if (p->fault == InjectedFault::kFailInFlight) {
          // The connection fails with the reply on its way: never read.
          Failed(id, attempt,
                 absl::UnavailableError(
                     "injected fault: the connection failed after the request was sent"),
                 true);
          return;
        }
        Finish(id, msg);
      },
      [this, id, attempt](Connection&, const absl::Status& why) {
        if (Current(id, attempt) == nullptr) return;
        Failed(id, attempt,
               absl::UnavailableError(absl::StrCat("the head at ", options_.head_address,
                                                   " closed the connection: ", why.message())),
               true);
      });
  {
    OutMessage out;
    InitHello(out.Init(), proto::Role::CLI);
    p.conn->Send(out.builder());
  }
  p.conn->SendFramed(p.request);
}

void HeadRequester::Failed(uint64_t id, int attempt, absl::Status why, bool sent) {
  Pending* p = Current(id, attempt);
  if (p == nullptr) return;
  if (sent && !p->resend_safe) {
    Finish(id, absl::UnavailableError(absl::StrCat(
                   why.message(), "; not retried: the head may or may not have acted on the request")));
    return;
  }
  std::chrono::milliseconds pause;
  if (p->attempt + 1 < kControlAttempts) {
    pause = ControlRetryBackoff(p->attempt + 1);
  } else {
    // The quick attempts are spent: the head is gone; wait for it to come
    // back (a restart over its persisted state) as GetHeadReconnect() says.
    const auto now = std::chrono::steady_clock::now();
    if (p->reconnect.give_up_after.count() <= 0) {
      Finish(id, std::move(why));
      return;
    }
    p->head_backoff.Start(now);
    if (!p->reconnect.head_persistent || p->head_backoff.Expired(now)) {
      Finish(id, HeadLostError(options_.head_address, p->reconnect, p->head_backoff.Elapsed(now),
                               why));
      return;
    }
    pause = p->head_backoff.NextDelay();
  }
  // This attempt's connection goes; the next one starts after a pause.
  ++p->attempt;
  Release(*p);
  p->timer->cancel();  // the next attempt arms the deadline again
  p->backoff = std::make_unique<boost::asio::steady_timer>(io_, pause);
  const int next = p->attempt;
  p->backoff->async_wait([this, id, next](const boost::system::error_code& ec) {
    if (ec || Current(id, next) == nullptr) return;
    StartAttempt(id);
  });
}

void HeadRequester::Release(Pending& p) {
  if (p.resolver) p.resolver->cancel();
  boost::system::error_code ignored;
  if (p.socket) p.socket->close(ignored);
  if (p.conn) {
    std::shared_ptr<Connection> conn = std::move(p.conn);
    conn->Close(absl::CancelledError("head request attempt done"));
    // Its handlers may still be on the stack (a reply, a close): free it later.
    lumen::ReleaseLater(io_, "worker.release_head_request", std::move(conn));
  }
  if (p.resolver) {
    std::shared_ptr<boost::asio::ip::tcp::resolver> resolver(std::move(p.resolver));
    lumen::ReleaseLater(io_, "worker.release_head_request", std::move(resolver));
  }
  p.socket.reset();
}

void HeadRequester::Finish(uint64_t id, absl::StatusOr<proto::Envelope::Reader> reply) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  std::shared_ptr<Pending> p(std::move(it->second));
  pending_.erase(it);
  p->timer->cancel();
  if (p->backoff) p->backoff->cancel();
  if (p->resolver) p->resolver->cancel();
  boost::system::error_code ignored;
  if (p->socket) p->socket->close(ignored);
  auto done = std::move(p->done);
  done(std::move(reply));
  if (p->conn) p->conn->Close(absl::CancelledError("head request done"));
  // Its handlers may still be on the stack (a reply, a close): free it later.
  lumen::ReleaseLater(io_, "worker.release_head_request", std::move(p));
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
