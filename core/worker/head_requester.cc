#include "core/worker/head_requester.h"

#include "absl/strings/str_cat.h"
#include "lumen/common/address.h"
#include "lumen/common/head_client.h"
#include "lumen/common/post.h"

namespace lumen::runtime {

struct HeadRequester::Pending {
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
  auto pending = std::make_unique<Pending>();
  pending->fill = std::move(fill);
  pending->done = std::move(done);
  pending->timer = std::make_unique<boost::asio::steady_timer>(io_, options_.deadline);
  pending->timer->async_wait([this, id](const boost::system::error_code& ec) {
    if (ec) return;
    Finish(id, absl::DeadlineExceededError(absl::StrCat(
                   "the head at ", options_.head_address, " did not answer within ",
                   options_.deadline.count(), " ms")));
  });
  pending->resolver = std::make_unique<boost::asio::ip::tcp::resolver>(io_);
  auto* resolver = pending->resolver.get();
  pending_[id] = std::move(pending);
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
            [this, id](const boost::system::error_code& ec, const boost::asio::ip::tcp::endpoint&) {
              if (!pending_.contains(id)) return;
              if (ec) {
                Finish(id, absl::UnavailableError(absl::StrCat(
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
  p.conn = Connection::Create(AdoptTcp(io_, std::move(*p.socket)));
  p.socket.reset();
  p.conn->Start([this, id](Connection&, proto::Envelope::Reader msg) { Finish(id, msg); },
                [this, id](Connection&, const absl::Status& why) {
                  Finish(id, absl::UnavailableError(absl::StrCat(
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
