#include "core/head/node_state_gatherer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "lumen/common/address.h"
#include "lumen/common/connection.h"
#include "lumen/common/post.h"
#include "lumen/common/proto_util.h"

namespace lumen::head {
namespace {

// Our request ids on a node connection (the hello reply comes as 0).
constexpr uint64_t kStatsRequest = 1;
constexpr uint64_t kActorsRequest = 2;
constexpr uint64_t kTasksRequest = 3;
constexpr int kRequests = 3;

}  // namespace

// One node's call: its connection and how many answers are still missing.
struct NodeStateGatherer::NodeCall {
  std::shared_ptr<Connection> conn;
  int missing = kRequests;
  bool done = false;
};

// One round over every target. Owned by its callbacks and timer; io thread.
struct NodeStateGatherer::Round {
  explicit Round(boost::asio::io_context& io) : io(io), timer(io) {}

  // Node `i` is done (answered, failed or timed out); the round finishes
  // with the last one.
  void NodeDone(size_t i, absl::Status status) {
    NodeCall& call = calls[i];
    if (call.done) return;
    call.done = true;
    if (!status.ok()) answers[i].status = std::move(status);
    if (call.conn) {
      std::shared_ptr<Connection> conn = std::move(call.conn);
      conn->Close(absl::CancelledError("the dashboard has its answer"));
      // It may be on the stack (we are in its handler): release it later.
      lumen::ReleaseLater(io, "dashboard.release_node_connection", std::move(conn));
    }
    if (--pending == 0) Finish();
  }

  void Finish() {
    if (finished) return;
    finished = true;
    timer.cancel();
    std::vector<Done> callbacks = std::move(done);
    for (size_t i = 0; i + 1 < callbacks.size(); ++i) callbacks[i](answers);
    if (!callbacks.empty()) callbacks.back()(std::move(answers));
  }

  boost::asio::io_context& io;
  boost::asio::steady_timer timer;
  std::vector<NodeAnswer> answers;
  std::vector<NodeCall> calls;
  std::vector<Done> done;
  size_t pending = 0;
  bool finished = false;
};

void NodeStateGatherer::Gather(std::vector<Target> targets, Done done) {
  io_thread_.Check("NodeStateGatherer");
  if (auto round = in_flight_.lock(); round && !round->finished) {
    round->done.push_back(std::move(done));
    return;
  }
  auto round = std::make_shared<Round>(*options_.io);
  round->done.push_back(std::move(done));
  round->answers.resize(targets.size());
  round->calls.resize(targets.size());
  round->pending = targets.size();
  if (targets.empty()) {
    lumen::Post(*options_.io, "dashboard.gather_nothing", [round] { round->Finish(); });
    return;
  }
  in_flight_ = round;
  round->timer.expires_after(options_.timeout);
  round->timer.async_wait([round, timeout = options_.timeout](const boost::system::error_code& ec) {
    if (ec) return;
    for (size_t i = 0; i < round->calls.size(); ++i) {
      round->NodeDone(i, absl::DeadlineExceededError(
                             absl::StrCat("did not answer within ", timeout.count(), " ms")));
    }
  });
  for (size_t i = 0; i < targets.size(); ++i) {
    round->answers[i].node = targets[i].id;
    Ask(round, i, targets[i]);
  }
}

void NodeStateGatherer::Ask(const std::shared_ptr<Round>& round, size_t index,
                            const Target& target) {
  AsyncConnectToAddress(
      *options_.io, target.address, /*local_session_dir=*/"", options_.timeout,
      [round, index, token = options_.token](absl::StatusOr<Socket> socket) {
        if (round->calls[index].done) return;
        if (!socket.ok()) {
          round->NodeDone(index, socket.status());
          return;
        }
        auto conn = Connection::Create(std::move(*socket));
        round->calls[index].conn = conn;
        conn->Start(
            [round, index](Connection&, proto::Envelope::Reader msg) {
              NodeCall& call = round->calls[index];
              if (call.done) return;
              NodeAnswer& answer = round->answers[index];
              switch (msg.getRequestId()) {
                case kStatsRequest:
                  if (!msg.isNodeStats()) break;
                  for (auto f : msg.getNodeStats().getDashboard().getFailures()) {
                    answer.failures.push_back(FailureView{
                        .time_us = f.getTimeUs(),
                        .kind = f.getKind().cStr(),
                        .task_id = f.getTaskId().size() ? IdFrom<TaskId>(f.getTaskId()).Hex() : "",
                        .message = f.getMessage().cStr(),
                        .pid = f.getPid()});
                  }
                  --call.missing;
                  break;
                case kActorsRequest:
                  if (!msg.isStateRows()) break;
                  answer.actors = runtime::StateRowsOf(msg);
                  --call.missing;
                  break;
                case kTasksRequest:
                  if (!msg.isStateRows()) break;
                  answer.tasks = runtime::StateRowsOf(msg);
                  --call.missing;
                  break;
                default:
                  break;  // the hello reply
              }
              if (call.missing == 0) round->NodeDone(index, absl::OkStatus());
            },
            [round, index](Connection&, const absl::Status& why) {
              round->NodeDone(index, why.ok() ? absl::UnavailableError("the node closed the connection")
                                              : why);
            });
        {
          OutMessage out;
          auto hello = runtime::InitHello(out.Init(), proto::Role::CLI);
          hello.setToken(token);
          conn->Send(out.builder());
        }
        for (uint64_t id : {kStatsRequest, kActorsRequest, kTasksRequest}) {
          OutMessage out;
          auto env = out.Init();
          env.setRequestId(id);
          if (id == kStatsRequest) env.setGetNodeStats();
          if (id == kActorsRequest) env.setListState("actors");
          if (id == kTasksRequest) env.setListState("tasks");
          conn->Send(out.builder());
        }
      });
}

}  // namespace lumen::head
