// HeadLink: the node daemon's connection to the head. It connects
// asynchronously (resolve and connect bounded by Timeouts::connect_timeout),
// says hello and registers the node, reports the node's stats every report
// period, and hands the head's messages (cluster view, placement-group bundle
// batches, "you are dead") to the daemon; a bundle batch the head resends with
// the same key is answered with the first reply, not applied again. The
// fault injector (lumen/common/fault_injector.h) can break those batches here,
// on the node's side: "prepareBundles:drop_reply:1:1" acts, then drops the
// link instead of replying (doc/reliability.md, item 9).
// Nothing here blocks the io thread.
//
// Losing the head (doc/reliability.md, item 6): before the first registration
// it retries every Timeouts::head_retry_period, without end (the head may
// start later). Once registered, a lost head is retried with a Backoff (from
// the smaller of head_retry_period and the health-check period, doubling up
// to 2 s) until Timeouts::head_reconnect_timeout, and the node registers again
// under its own id with its resources; the work running on the node goes on
// meanwhile. The same reconnect heals a link reset while the head lives: the
// head keeps a node whose connection closed for its health-check grace
// (doc/reliability.md, item 8). When that time passes, on_head_lost tells
// the daemon to stop, with an error naming the head. When the head said it
// persists nothing (ClusterView.headPersistent false) a restarted head would
// not know the node, so the node retries only for the head's health-check
// grace (period x threshold: a reset link heals within it) and asks to come
// back as itself (rejoinNode): a head that knows it takes it back; one that
// does not (it restarted) answers markNodeDead, and the node stops with an
// error saying so, as it does when no head answers within the grace.
//
//   HeadLink head(io, {.head_address = "10.0.0.1:6379", .timeouts = t},
//                 {.fill_stats = ..., .on_cluster_view = ..., .on_bundles = ...,
//                  .on_marked_dead = ...});
//   head.Start();
//   head.SendJobEnded(job);
//
// Only on the node daemon's io thread (checked in debug builds); callbacks run
// on it too.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio.hpp>

#include "absl/status/status.h"
#include "core/node/keyed_requests.h"
#include "lumen/common/backoff.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"
#include "lumen/common/timeouts.h"

namespace lumen::node {

struct HeadLinkOptions {
  std::string head_address;  // host:port (or a Unix socket path)
  Timeouts timeouts;         // connect_timeout, head_retry_period, report period
  // The pipe whose closing stops this node with its cluster (-1: none). A
  // link lost once it is closed is the cluster stopping (its head goes
  // first), not worth a warning or a reconnect.
  int parent_fd = -1;
};

struct HeadLinkCallbacks {
  // Fills the node's stats for registration and each report.
  std::function<void(proto::NodeStats::Builder)> fill_stats;
  std::function<void(proto::ClusterView::Reader)> on_cluster_view;
  // A prepare/commit/cancel batch; its result is the reply to the head.
  std::function<absl::Status(proto::Envelope::Reader)> on_bundles;
  // Runs after the bundle reply went out (a commit may let parked work run).
  std::function<void(proto::Envelope::Reader)> after_bundles;
  std::function<void()> on_marked_dead;
  // The head is lost for good (see above): the daemon stops; `why` names the
  // head and the reason.
  std::function<void(const absl::Status& why)> on_head_lost;
  // Runs once, when the first connection attempt ended: registered (the head
  // answered with its first cluster view, which lists this node) or failed
  // (retries go on). The daemon reports itself ready then, so a driver that
  // starts a cluster finds the node registered.
  std::function<void()> after_first_attempt;
};

class HeadLink {
 public:
  HeadLink(boost::asio::io_context& io, HeadLinkOptions options, HeadLinkCallbacks callbacks);
  ~HeadLink();

  // Connects (and keeps reconnecting) until Stop.
  void Start();
  // Tells the head this node leaves on purpose (best effort, one non-blocking
  // send), and stops.
  void Leave(const NodeId& node);
  void Stop();

  // The job's driver left this node: the job ends everywhere.
  void SendJobEnded(const JobId& job);

  // The report period: LUMEN_REPORT_PERIOD_MS, but never slower than the head's
  // health checks (a node reports at least as often as the head checks).
  std::chrono::milliseconds report_period() const;
  // What the head said in its last view: its tables survive its restart.
  bool head_persistent() const { return head_persistent_; }
  // Registered with the head now (its view arrived on the open connection).
  bool registered() const { return registered_; }

 private:
  void Connect();
  void ConnectTcp(const std::string& host, const std::string& port);
  // Connects to the first of `endpoints` that answers (attempt `attempt`).
  void ConnectEndpoints(std::vector<boost::asio::ip::tcp::endpoint> endpoints, uint64_t attempt);
  void OnConnected(Socket socket);
  void RetryLater(const std::string& why);
  void ReportLater();
  void OnFrame(proto::Envelope::Reader msg);
  void FirstAttemptDone();
  // The open connection closed: retry, or give up (on_head_lost).
  void OnLost(const absl::Status& why);
  // A fault injected into a bundle batch `msg` (LUMEN_FAULT_INJECT, e.g.
  // "commitBundles:drop_reply:1:1"): closes the link as a reset would,
  // `when` ("before acting on it": fail_before_send; "after acting on it",
  // the reply kept for the head's resend but not sent: drop_reply and
  // fail_in_flight). The link reconnects as after any reset.
  void DropLinkOnPurpose(proto::Envelope::Reader msg, const char* when);

  ThreadChecker io_thread_;
  boost::asio::io_context& io_;
  HeadLinkOptions options_;
  HeadLinkCallbacks callbacks_;
  std::shared_ptr<Connection> conn_;
  // The head's keyed bundle batches and our replies (BundleBatch.retryKey):
  // a resent batch is not applied twice (doc/reliability.md, item 9).
  KeyedRequests keyed_;
  boost::asio::steady_timer retry_timer_;
  boost::asio::steady_timer report_timer_;
  boost::asio::steady_timer connect_deadline_;
  // The attempt in flight (its socket is closed at the deadline).
  std::shared_ptr<boost::asio::ip::tcp::socket> connecting_;
  std::shared_ptr<boost::asio::local::stream_protocol::socket> connecting_local_;
  std::shared_ptr<boost::asio::ip::tcp::resolver> resolver_;
  uint64_t attempt_ = 0;  // attempts started; a late completion of an old one is ignored
  bool stopped_ = false;
  bool first_attempt_done_ = false;
  bool registered_ = false;       // a view came on the current connection
  bool ever_registered_ = false;  // ... on any connection
  bool head_persistent_ = false;  // the last view's headPersistent
  Backoff backoff_;               // started when a registered connection is lost
  // Persistence off: registered before and lost; the node stops unless the
  // head takes it back (rejoinNode) by then (the head's health-check grace).
  std::optional<std::chrono::steady_clock::time_point> rejoin_deadline_;
};

}  // namespace lumen::node
