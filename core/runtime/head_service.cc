#include "core/runtime/head_service.h"

#include <signal.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <algorithm>
#include <map>
#include <memory>
#include <cstdlib>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/connection.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/ids.h"
#include "lumen/common/logging.h"
#include "lumen/scheduler/cluster_view.h"
#include "core/runtime/kv_service.h"

namespace lumen::runtime {
namespace {

namespace asio = boost::asio;

class HeadService {
 public:
  explicit HeadService(const HeadOptions& options)
      : options_(options),
        acceptor_(io_),
        signals_(io_, SIGTERM, SIGINT),
        kv_(io_, KvLimits::FromEnv(options.kv_limits),
            [this](uint64_t id) -> Connection* {
              auto it = conns_.find(id);
              return it == conns_.end() || it->second->closed() ? nullptr : it->second.get();
            }),
        health_timer_(io_) {}

  int Run() {
    logging::SetProcessTag("head");
    boost::system::error_code ec;
    asio::ip::tcp::endpoint endpoint(asio::ip::make_address(options_.host, ec), options_.port);
    if (!ec) acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(512, ec);
    if (ec) {
      LUMEN_LOG(ERROR) << "head cannot listen on " << options_.host << ":" << options_.port
                       << ": " << ec.message();
      if (options_.ready_fd >= 0) {
        std::string line = absl::StrCat("error cannot listen on ", options_.host, ":",
                                        options_.port, ": ", ec.message(), "\n");
        ssize_t ignored = ::write(options_.ready_fd, line.data(), line.size());
        (void)ignored;
      }
      return 1;
    }
    address_ = absl::StrCat(options_.host, ":", acceptor_.local_endpoint().port());
    // Beyond loopback, every connection must prove it holds the token.
    require_token_ = !IsLoopbackHost(options_.host);
    if (require_token_ && options_.token.empty()) {
      LUMEN_LOG(ERROR) << "the head listens on " << options_.host << " but has no token";
      return 1;
    }
    signals_.async_wait([this](const boost::system::error_code& e, int) {
      if (!e) Stop();
    });
    if (options_.parent_fd >= 0) {
      parent_watch_.emplace(io_, options_.parent_fd);
      auto buf = std::make_shared<char>();
      parent_watch_->async_read_some(asio::buffer(buf.get(), 1),
                                     [this, buf](const boost::system::error_code&, size_t) { Stop(); });
    }
    AcceptNext();
    CheckHealth();
    if (options_.ready_fd >= 0) {
      std::string line = absl::StrCat("ready ", address_, "\n");
      ssize_t ignored = ::write(options_.ready_fd, line.data(), line.size());
      (void)ignored;
      ::close(options_.ready_fd);
    }
    LUMEN_LOG(INFO) << "head serving on " << address_;
    io_.run();
    return 0;
  }

 private:
  // A named actor's directory entry.
  struct ActorNameEntry {
    std::string id;       // actor id bytes
    std::string owner;    // owner's address
    std::string address;  // detached actors: the actor process's address
  };
  struct NodeEntry {
    std::string stats_frame;  // the node's last report, as a framed NodeStats message
    uint64_t conn_id = 0;
    bool alive = true;
    std::chrono::steady_clock::time_point last_report;
    std::map<std::string, double> total;
    std::map<std::string, double> available;
    std::vector<JobId> drivers;  // jobs whose driver is attached to this node
  };
  // A placement group: PENDING (waiting to fit) -> PREPARING (phase 1 on its
  // nodes) -> CREATED, back to PENDING when a node refuses (rolled back);
  // REMOVED is final.
  struct GroupEntry {
    std::string id;
    std::string name;
    proto::PlacementStrategy strategy = proto::PlacementStrategy::PACK;
    std::vector<std::map<std::string, double>> bundles;
    std::string state = "PENDING";
    std::vector<NodeId> nodes;  // per bundle, once placed
    std::string error;          // why it is still pending
    bool infeasible = false;
    int outstanding = 0;        // replies awaited in the phase under way
    bool failed = false;        // a node refused in this phase
    struct Waiter {
      std::weak_ptr<Connection> conn;
      uint64_t conn_id;
      uint64_t request_id;
      std::shared_ptr<asio::steady_timer> timer;
    };
    std::vector<Waiter> waiters;
  };

  void Stop() {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    io_.stop();
  }

  void AcceptNext() {
    acceptor_.async_accept([this](const boost::system::error_code& ec, asio::ip::tcp::socket s) {
      if (ec) return;
      s.set_option(asio::ip::tcp::no_delay(true));
      auto protocol = s.local_endpoint().protocol();
      int fd = s.release();
      auto conn = admission_.Admit(
          Socket(io_, asio::generic::stream_protocol(protocol.family(), protocol.protocol()), fd));
      if (!conn) {
        AcceptNext();
        return;
      }
      conn->context() = false;
      conns_[conn->id()] = conn;
      conn->Start([this](Connection& c, proto::Envelope::Reader m) { OnFrame(c, m); },
                  [this](Connection& c, const absl::Status& why) { OnClose(c, why); });
      AcceptNext();
    });
  }

  void StoreReport(Connection& conn, proto::NodeStats::Reader stats) {
    auto id = stats.getNodeId();
    NodeId node = IdFrom<NodeId>(id);
    capnp::MallocMessageBuilder copy;
    copy.setRoot(stats);
    NodeEntry& entry = nodes_[node];
    if (entry.conn_id == 0) {
      LUMEN_LOG(INFO) << "node " << node.Hex().substr(0, 12) << " joined ("
                      << stats.getAddress().cStr() << ")";
    }
    bool joined = entry.conn_id == 0 || !entry.alive;
    entry.conn_id = conn.id();
    entry.alive = true;
    entry.last_report = std::chrono::steady_clock::now();
    entry.total.clear();
    entry.available.clear();
    for (auto r : stats.getTotal()) entry.total[r.getName().cStr()] = r.getQuantity();
    for (auto r : stats.getAvailable()) entry.available[r.getName().cStr()] = r.getQuantity();
    entry.drivers.clear();
    for (auto d : stats.getDrivers()) entry.drivers.push_back(IdFrom<JobId>(d));
    entry.stats_frame.clear();
    AppendFrame(copy, &entry.stats_frame);
    if (joined) {
      BroadcastView();
    } else {
      SendView(conn);
    }
    SchedulePending();
  }

  // Every node's last report, with the head's verdict on whether it is alive.
  void FillNodes(capnp::List<proto::NodeStats>::Builder list) {
    size_t i = 0;
    for (auto& [id, entry] : nodes_) {
      const auto* words =
          reinterpret_cast<const capnp::word*>(entry.stats_frame.data() + kFrameHeaderBytes);
      size_t n = (entry.stats_frame.size() - kFrameHeaderBytes) / sizeof(capnp::word);
      capnp::FlatArrayMessageReader reader(kj::arrayPtr(words, n));
      list.setWithCaveats(i, reader.getRoot<proto::NodeStats>());
      list[i].setAlive(entry.alive);
      ++i;
    }
  }

  void FillView(proto::ClusterView::Builder view) {
    FillNodes(view.initNodes(nodes_.size()));
    auto jobs = view.initEndedJobs(ended_jobs_.size());
    for (size_t j = 0; j < ended_jobs_.size(); ++j) jobs.set(j, DataOf(ended_jobs_[j]));
    size_t bundles = 0, removed = 0;
    for (const auto& [gid, g] : groups_) {
      if (g.state == "CREATED") bundles += g.bundles.size();
      if (g.state == "REMOVED") ++removed;
    }
    auto blist = view.initBundles(bundles);
    auto rlist = view.initRemovedGroups(removed);
    size_t b = 0, r = 0;
    for (const auto& [gid, g] : groups_) {
      if (g.state == "REMOVED") rlist.set(r++, StringData(gid));
      if (g.state != "CREATED") continue;
      for (size_t k = 0; k < g.bundles.size(); ++k, ++b) {
        blist[b].setGroupId(StringData(gid));
        blist[b].setIndex(static_cast<int32_t>(k));
        blist[b].setNodeId(DataOf(g.nodes[k]));
        SetResources(blist[b].initResources(g.bundles[k].size()), g.bundles[k]);
      }
    }
  }

  static capnp::Data::Reader StringData(const std::string& s) {
    return capnp::Data::Reader(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }

  void SendView(Connection& conn) {
    capnp::MallocMessageBuilder out;
    FillView(out.initRoot<proto::Envelope>().initClusterView());
    conn.Send(out);
  }

  void BroadcastView() {
    capnp::MallocMessageBuilder out;
    FillView(out.initRoot<proto::Envelope>().initClusterView());
    std::string frame;
    AppendFrame(out, &frame);
    for (auto& [id, entry] : nodes_) {
      if (!entry.alive) continue;
      auto cit = conns_.find(entry.conn_id);
      if (cit != conns_.end() && !cit->second->closed()) cit->second->SendFramed(frame);
    }
  }

  // Health checks: a node that has not reported for `failure_threshold`
  // periods is dead; it is told so (if it still listens) and must rejoin as new.
  void CheckHealth() {
    auto now = std::chrono::steady_clock::now();
    auto limit = std::chrono::milliseconds(options_.health_check_period_ms) *
                 options_.health_check_failure_threshold;
    bool changed = false;
    for (auto& [id, entry] : nodes_) {
      if (!entry.alive || now - entry.last_report <= limit) continue;
      LUMEN_LOG(WARNING) << "node " << id.Hex().substr(0, 12) << " is dead (no report for "
                         << options_.health_check_failure_threshold << " health check periods of "
                         << options_.health_check_period_ms << " ms)";
      MarkDead(id, entry);
      changed = true;
    }
    if (changed) {
      BroadcastView();
      SchedulePending();
    }
    health_timer_.expires_after(std::chrono::milliseconds(options_.health_check_period_ms));
    health_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) CheckHealth();
    });
  }

  void MarkDead(const NodeId& id, NodeEntry& entry) {
    entry.alive = false;
    dead_nodes_.insert(id);
    auto cit = conns_.find(entry.conn_id);
    if (cit != conns_.end() && !cit->second->closed()) {
      OutMessage out;
      out.Init().setMarkNodeDead(DataOf(id));
      cit->second->Send(out.builder());
    }
    // Its drivers are gone with it: their jobs end on every node.
    for (const auto& job : entry.drivers) {
      if (std::find(ended_jobs_.begin(), ended_jobs_.end(), job) == ended_jobs_.end()) {
        ended_jobs_.push_back(job);
      }
    }
    // Groups with a bundle there are placed again, whole (what ran in their
    // other bundles ends too, and restarts within its limits).
    for (auto& [gid, g] : groups_) {
      if (g.state != "CREATED") continue;
      if (std::find(g.nodes.begin(), g.nodes.end(), id) == g.nodes.end()) continue;
      LUMEN_LOG(WARNING) << "placement group " << g.name << " lost a bundle on node "
                         << id.Hex().substr(0, 12) << "; placing it again";
      SendPhase(g, proto::Envelope::CANCEL_BUNDLES, nullptr);
      g.state = "PENDING";
      g.error = "a node holding one of its bundles died";
    }
    // Phase replies that will never come: the group's placement failed.
    std::vector<uint64_t> lost;
    for (const auto& [rid, pending] : bundle_requests_)
      if (pending.first == entry.conn_id) lost.push_back(rid);
    for (uint64_t rid : lost) {
      auto cb = std::move(bundle_requests_[rid].second);
      bundle_requests_.erase(rid);
      cb(false, "the node died");
    }
  }

  void OnFrame(Connection& conn, proto::Envelope::Reader msg) {
    bool& hello_seen = std::any_cast<bool&>(conn.context());
    if (!hello_seen) {
      if (!msg.isHello() || msg.getHello().getProtocolVersion() != proto::PROTOCOL_VERSION) {
        conn.Close(absl::PermissionDeniedError("first frame was not a valid hello"));
        return;
      }
      if (require_token_ &&
          !ConstantTimeEquals(std::string_view(msg.getHello().getToken().cStr(),
                                               msg.getHello().getToken().size()),
                              options_.token)) {
        conn.Close(absl::PermissionDeniedError(
            msg.getHello().getToken().size() == 0 ? "connection without the cluster token"
                                                  : "connection with a wrong cluster token"));
        return;
      }
      hello_seen = true;
      conn.AcceptHello();
      return;
    }
    if (kv_.Handle(conn, msg)) return;
    switch (msg.which()) {
      case proto::Envelope::REGISTER_NODE: {
        NodeId id = IdFrom<NodeId>(msg.getRegisterNode().getNodeId());
        if (dead_nodes_.contains(id)) {
          // Declared dead once: its old incarnation may not come back.
          OutMessage out;
          out.Init().setMarkNodeDead(DataOf(id));
          conn.Send(out.builder());
          return;
        }
        StoreReport(conn, msg.getRegisterNode());
        return;
      }
      case proto::Envelope::REPORT_NODE: {
        NodeId id = IdFrom<NodeId>(msg.getReportNode().getNodeId());
        if (dead_nodes_.contains(id)) return;  // late: it was declared dead
        StoreReport(conn, msg.getReportNode());
        return;
      }
      case proto::Envelope::MARK_NODE_DEAD: {
        // A node leaving on purpose (lumen stop, its driver exited).
        NodeId id = IdFrom<NodeId>(msg.getMarkNodeDead());
        auto it = nodes_.find(id);
        if (it != nodes_.end() && it->second.alive && it->second.conn_id == conn.id()) {
          LUMEN_LOG(INFO) << "node " << id.Hex().substr(0, 12) << " left";
          MarkDead(id, it->second);
          BroadcastView();
          SchedulePending();
        }
        return;
      }
      case proto::Envelope::JOB_ENDED:
        ended_jobs_.push_back(IdFrom<JobId>(msg.getJobEnded()));
        if (ended_jobs_.size() > 1000) ended_jobs_.erase(ended_jobs_.begin());
        BroadcastView();
        return;
      case proto::Envelope::BUNDLE_REPLY: {
        auto it = bundle_requests_.find(msg.getRequestId());
        if (it == bundle_requests_.end()) return;
        auto cb = std::move(it->second.second);
        bundle_requests_.erase(it);
        cb(msg.getBundleReply().getOk(), msg.getBundleReply().getError().cStr());
        return;
      }
      case proto::Envelope::CREATE_PLACEMENT_GROUP:
        OnCreateGroup(conn, msg);
        return;
      case proto::Envelope::WAIT_PLACEMENT_GROUP:
        OnWaitGroup(conn, msg);
        return;
      case proto::Envelope::REMOVE_PLACEMENT_GROUP:
        OnRemoveGroup(conn, msg);
        return;
      case proto::Envelope::LIST_PLACEMENT_GROUPS: {
        capnp::MallocMessageBuilder out;
        auto env = out.initRoot<proto::Envelope>();
        env.setRequestId(msg.getRequestId());
        auto list = env.initPlacementGroups(groups_.size());
        size_t i = 0;
        for (const auto& [gid, g] : groups_) FillGroupState(list[i++], g);
        conn.Send(out);
        return;
      }
      case proto::Envelope::GET_NODES: {
        capnp::MallocMessageBuilder out;
        auto env = out.initRoot<proto::Envelope>();
        env.setRequestId(msg.getRequestId());
        FillNodes(env.initNodes(nodes_.size()));
        conn.Send(out);
        return;
      }
      case proto::Envelope::REGISTER_ACTOR_NAME: {
        auto entry = msg.getRegisterActorName();
        std::string name = entry.getName().cStr();
        OutMessage out;
        auto env = out.Init();
        env.setRequestId(msg.getRequestId());
        auto reply = env.initActorNameReply();
        reply.setName(name);
        auto it = actor_names_.find(name);
        if (it != actor_names_.end()) {
          reply.setOk(false);
          reply.setError("an actor named '" + name + "' already exists");
        } else if (name.size() > limits_.max_name_bytes) {
          reply.setOk(false);
          reply.setError(absl::StrCat("an actor name of ", name.size(),
                                      " bytes is over the limit of ", limits_.max_name_bytes,
                                      " bytes"));
        } else if (actor_names_.size() >= limits_.max_named_actors) {
          reply.setOk(false);
          reply.setError(absl::StrCat("the cluster already has ", actor_names_.size(),
                                      " named actors, the limit (LUMEN_MAX_NAMED_ACTORS)"));
        } else {
          auto id = entry.getActorId();
          actor_names_[name] = {std::string(reinterpret_cast<const char*>(id.begin()), id.size()),
                                entry.getOwnerAddress().cStr(), ""};
          reply.setOk(true);
        }
        conn.Send(out.builder());
        return;
      }
      case proto::Envelope::LOOKUP_ACTOR_NAME: {
        std::string name = msg.getLookupActorName().cStr();
        OutMessage out;
        auto env = out.Init();
        env.setRequestId(msg.getRequestId());
        auto reply = env.initActorNameReply();
        reply.setName(name);
        auto it = actor_names_.find(name);
        if (it == actor_names_.end()) {
          reply.setOk(false);
          reply.setError("no actor named '" + name + "'");
        } else {
          FillActorName(reply, name, it->second);
        }
        conn.Send(out.builder());
        return;
      }
      case proto::Envelope::UPDATE_ACTOR_ADDRESS: {
        auto entry = msg.getUpdateActorAddress();
        auto it = FindActorName(entry);
        if (it != actor_names_.end()) {
          it->second.address = entry.getAddress().cStr();
        }
        SendAck(conn, msg.getRequestId());
        return;
      }
      case proto::Envelope::LOOKUP_ACTOR_BY_ID: {
        auto id = msg.getLookupActorById();
        std::string key(reinterpret_cast<const char*>(id.begin()), id.size());
        OutMessage out;
        auto env = out.Init();
        env.setRequestId(msg.getRequestId());
        auto reply = env.initActorNameReply();
        reply.setOk(false);
        for (const auto& [name, entry] : actor_names_) {
          if (entry.id == key) FillActorName(reply, name, entry);
        }
        conn.Send(out.builder());
        return;
      }
      case proto::Envelope::UNREGISTER_ACTOR_NAME: {
        auto entry = msg.getUnregisterActorName();
        auto it = FindActorName(entry);
        if (it != actor_names_.end()) {
          actor_names_.erase(it);
        }
        SendAck(conn, msg.getRequestId());
        return;
      }
      default: {
        static auto* limiter = new logging::RateLimiter(5, std::chrono::seconds(1));
        uint64_t suppressed = 0;
        if (limiter->Allow(&suppressed)) {
          LUMEN_LOG(WARNING) << "head: ignoring an unexpected message (" << msg.which()
                             << ") from " << conn.peer() << " (" << suppressed
                             << " more suppressed)";
        }
      }
    }
  }

  void FillGroupState(proto::PlacementGroupState::Builder out, const GroupEntry& g) {
    out.setGroupId(StringData(g.id));
    out.setName(g.name);
    out.setStrategy(g.strategy);
    out.setState(g.infeasible && g.state == "PENDING" ? "INFEASIBLE" : g.state);
    out.setError(g.error);
    auto bundles = out.initBundles(g.bundles.size());
    for (size_t i = 0; i < g.bundles.size(); ++i) {
      bundles[i].setIndex(static_cast<int32_t>(i));
      SetResources(bundles[i].initResources(g.bundles[i].size()), g.bundles[i]);
      if (i < g.nodes.size()) bundles[i].setNodeId(DataOf(g.nodes[i]));
    }
  }

  void ReplyGroupState(Connection& conn, uint64_t request_id, const GroupEntry& g) {
    capnp::MallocMessageBuilder out;
    auto env = out.initRoot<proto::Envelope>();
    env.setRequestId(request_id);
    FillGroupState(env.initPlacementGroupState(), g);
    conn.Send(out);
  }

  void OnCreateGroup(Connection& conn, proto::Envelope::Reader msg) {
    auto spec = msg.getCreatePlacementGroup();
    std::string id(reinterpret_cast<const char*>(spec.getGroupId().begin()),
                   spec.getGroupId().size());
    std::string refusal;
    if (!groups_.contains(id)) {
      if (live_groups_ >= limits_.max_placement_groups) {
        refusal = absl::StrCat("the cluster already has ", live_groups_,
                               " placement groups, the limit (LUMEN_MAX_PLACEMENT_GROUPS); remove "
                               "some first");
      } else if (spec.getName().size() > limits_.max_name_bytes) {
        refusal = absl::StrCat("a placement group name of ", spec.getName().size(),
                               " bytes is over the limit of ", limits_.max_name_bytes, " bytes");
      } else if (spec.getBundles().size() > limits_.max_bundles_per_group) {
        refusal = absl::StrCat("a placement group of ", spec.getBundles().size(),
                               " bundles is over the limit of ", limits_.max_bundles_per_group);
      }
    }
    if (!refusal.empty()) {
      GroupEntry refused;
      refused.id = id;
      refused.state = "REMOVED";
      refused.error = refusal;
      ReplyGroupState(conn, msg.getRequestId(), refused);
      return;
    }
    auto [it, inserted] = groups_.try_emplace(id);
    GroupEntry& g = it->second;
    if (inserted) {
      ++live_groups_;
      g.id = id;
      g.name = spec.getName().cStr();
      g.strategy = spec.getStrategy();
      for (auto b : spec.getBundles()) g.bundles.push_back(ReadResources(b.getResources()));
      group_order_.push_back(id);
    }
    ReplyGroupState(conn, msg.getRequestId(), g);
    SchedulePending();
  }

  void OnWaitGroup(Connection& conn, proto::Envelope::Reader msg) {
    auto wait = msg.getWaitPlacementGroup();
    std::string id(reinterpret_cast<const char*>(wait.getGroupId().begin()),
                   wait.getGroupId().size());
    auto it = groups_.find(id);
    if (it == groups_.end()) {
      GroupEntry unknown;
      unknown.id = id;
      unknown.state = "REMOVED";
      unknown.error = "no such placement group";
      ReplyGroupState(conn, msg.getRequestId(), unknown);
      return;
    }
    GroupEntry& g = it->second;
    if (g.state == "CREATED" || g.state == "REMOVED" || wait.getTimeoutMs() == 0) {
      ReplyGroupState(conn, msg.getRequestId(), g);
      return;
    }
    auto timer = std::make_shared<asio::steady_timer>(
        io_, std::chrono::milliseconds(wait.getTimeoutMs()));
    uint64_t request_id = msg.getRequestId();
    std::weak_ptr<Connection> weak = conn.weak_from_this();
    size_t& parked = parked_waits_[conn.id()];
    if (parked >= limits_.max_parked_requests_per_connection) {
      // Enough parked for this client: answer now with the current state.
      ReplyGroupState(conn, request_id, g);
      return;
    }
    ++parked;
    g.waiters.push_back({weak, conn.id(), request_id, timer});
    uint64_t conn_id = conn.id();
    timer->async_wait([this, id, weak, conn_id, request_id](const boost::system::error_code& ec) {
      if (ec) return;
      auto git = groups_.find(id);
      if (git == groups_.end()) return;
      auto& waiters = git->second.waiters;
      for (auto w = waiters.begin(); w != waiters.end(); ++w) {
        if (w->request_id == request_id && w->conn_id == conn_id) {
          UnparkWait(conn_id);
          waiters.erase(w);
          if (auto c = weak.lock()) ReplyGroupState(*c, request_id, git->second);
          return;
        }
      }
    });
  }

  void NotifyWaiters(GroupEntry& g) {
    auto waiters = std::move(g.waiters);
    g.waiters.clear();
    for (auto& w : waiters) {
      UnparkWait(w.conn_id);
      w.timer->cancel();
      if (auto c = w.conn.lock()) ReplyGroupState(*c, w.request_id, g);
    }
  }

  void UnparkWait(uint64_t conn_id) {
    auto it = parked_waits_.find(conn_id);
    if (it != parked_waits_.end() && --it->second == 0) parked_waits_.erase(it);
  }

  // Removed groups are remembered (for waits and the view) only up to a bound.
  void ForgetOldRemovedGroups() {
    constexpr size_t kRemovedGroupsKept = 1000;
    if (groups_.size() - live_groups_ <= kRemovedGroupsKept) return;
    size_t excess = groups_.size() - live_groups_ - kRemovedGroupsKept;
    std::vector<std::string> kept;
    kept.reserve(group_order_.size());
    for (auto& id : group_order_) {
      auto it = groups_.find(id);
      if (excess > 0 && it != groups_.end() && it->second.state == "REMOVED" &&
          it->second.waiters.empty()) {
        groups_.erase(it);
        --excess;
        continue;
      }
      kept.push_back(std::move(id));
    }
    group_order_.swap(kept);
  }

  void OnRemoveGroup(Connection& conn, proto::Envelope::Reader msg) {
    std::string id(reinterpret_cast<const char*>(msg.getRemovePlacementGroup().begin()),
                   msg.getRemovePlacementGroup().size());
    auto it = groups_.find(id);
    if (it != groups_.end() && it->second.state != "REMOVED") {
      GroupEntry& g = it->second;
      bool placed = g.state == "CREATED" || g.state == "PREPARING";
      if (placed) SendPhase(g, proto::Envelope::CANCEL_BUNDLES, nullptr);
      g.state = "REMOVED";
      --live_groups_;
      NotifyWaiters(g);
      BroadcastView();
      ForgetOldRemovedGroups();
    }
    SendAck(conn, msg.getRequestId());
  }

  // Sends one phase (prepare, commit or cancel) of group `g` to each node it
  // uses; `done(ok, error)` runs once every node answered (not for cancel).
  void SendPhase(GroupEntry& g, proto::Envelope::Which phase,
                 std::function<void(bool, std::string)> done) {
    std::map<NodeId, std::vector<size_t>> per_node;
    for (size_t i = 0; i < g.nodes.size(); ++i) per_node[g.nodes[i]].push_back(i);
    auto remaining = std::make_shared<int>(static_cast<int>(per_node.size()));
    auto ok = std::make_shared<bool>(true);
    auto error = std::make_shared<std::string>();
    for (const auto& [node, indices] : per_node) {
      auto nit = nodes_.find(node);
      std::shared_ptr<Connection> conn;
      if (nit != nodes_.end() && nit->second.alive) {
        auto cit = conns_.find(nit->second.conn_id);
        if (cit != conns_.end() && !cit->second->closed()) conn = cit->second;
      }
      auto finish = [remaining, ok, error, done](bool success, std::string why) {
        if (!success) {
          *ok = false;
          if (error->empty()) *error = why;
        }
        if (--*remaining == 0 && done) done(*ok, *error);
      };
      if (!conn) {
        finish(false, "a chosen node is gone");
        continue;
      }
      uint64_t request_id = next_request_id_++;
      OutMessage out;
      auto env = out.Init();
      env.setRequestId(request_id);
      proto::BundleBatch::Builder batch = phase == proto::Envelope::PREPARE_BUNDLES
                                              ? env.initPrepareBundles()
                                          : phase == proto::Envelope::COMMIT_BUNDLES
                                              ? env.initCommitBundles()
                                              : env.initCancelBundles();
      batch.setGroupId(StringData(g.id));
      auto list = batch.initBundles(indices.size());
      for (size_t k = 0; k < indices.size(); ++k) {
        list[k].setIndex(static_cast<int32_t>(indices[k]));
        SetResources(list[k].initResources(g.bundles[indices[k]].size()), g.bundles[indices[k]]);
      }
      if (phase != proto::Envelope::CANCEL_BUNDLES) {
        bundle_requests_[request_id] = {conn->id(), finish};
      }
      conn->Send(out.builder());
    }
  }

  // Places pending groups, one at a time, with a two-phase reservation.
  void SchedulePending() {
    for (const auto& id : group_order_) {
      auto it = groups_.find(id);
      if (it == groups_.end()) continue;
      if (it->second.state == "PREPARING") return;  // one at a time
    }
    for (const auto& id : group_order_) {
      auto it = groups_.find(id);
      if (it == groups_.end() || it->second.state != "PENDING") continue;
      GroupEntry& g = it->second;
      scheduler::ClusterResourceView view;
      for (const auto& [nid, entry] : nodes_) {
        auto total = scheduler::ResourceSet::FromMap(entry.total);
        auto available = scheduler::ResourceSet::FromMap(entry.available);
        if (!total.ok() || !available.ok()) continue;
        view.Upsert(std::string(reinterpret_cast<const char*>(nid.data()), NodeId::kSize),
                    scheduler::NodeResources{*total, *available, entry.alive});
      }
      std::vector<scheduler::ResourceSet> bundles;
      bool valid = true;
      for (const auto& b : g.bundles) {
        auto set = scheduler::ResourceSet::FromMap(b);
        if (!set.ok()) {
          valid = false;
          g.error = std::string(set.status().message());
          break;
        }
        bundles.push_back(*set);
      }
      if (!valid) continue;
      auto placed = view.PlaceBundles(bundles, static_cast<scheduler::PlacementStrategy>(g.strategy));
      if (!placed.ok()) {
        bool infeasible = placed.status().code() == absl::StatusCode::kFailedPrecondition;
        if (g.error != placed.status().message()) {
          LUMEN_LOG(INFO) << "placement group " << g.name << " waits: " << placed.status().message();
        }
        g.error = std::string(placed.status().message());
        g.infeasible = infeasible;
        continue;
      }
      g.nodes.clear();
      for (const auto& n : *placed) g.nodes.push_back(NodeId::FromBinary(n));
      g.state = "PREPARING";
      g.error.clear();
      g.infeasible = false;
      std::string gid = g.id;
      SendPhase(g, proto::Envelope::PREPARE_BUNDLES, [this, gid](bool ok, std::string why) {
        OnPrepared(gid, ok, why);
      });
      return;
    }
  }

  void OnPrepared(const std::string& id, bool ok, const std::string& why) {
    auto it = groups_.find(id);
    if (it == groups_.end()) return;
    GroupEntry& g = it->second;
    if (g.state != "PREPARING") return;  // removed meanwhile (and cancelled)
    if (!ok) {
      // Roll back what the other nodes reserved; try again at the next report.
      LUMEN_LOG(INFO) << "placement group " << g.name << ": a node refused (" << why
                      << "); rolling back";
      SendPhase(g, proto::Envelope::CANCEL_BUNDLES, nullptr);
      g.state = "PENDING";
      g.error = why;
      ++rollbacks_;
      return;
    }
    SendPhase(g, proto::Envelope::COMMIT_BUNDLES, [this, id](bool committed, std::string error) {
      auto git = groups_.find(id);
      if (git == groups_.end() || git->second.state != "PREPARING") return;
      if (!committed) {
        SendPhase(git->second, proto::Envelope::CANCEL_BUNDLES, nullptr);
        git->second.state = "PENDING";
        git->second.error = error;
        return;
      }
      git->second.state = "CREATED";
      NotifyWaiters(git->second);
      BroadcastView();
      SchedulePending();
    });
  }

  // The directory entry `entry` names, if it is for the same actor.
  std::map<std::string, ActorNameEntry>::iterator FindActorName(proto::ActorName::Reader entry) {
    auto it = actor_names_.find(entry.getName().cStr());
    auto id = entry.getActorId();
    if (it != actor_names_.end() &&
        it->second.id != std::string(reinterpret_cast<const char*>(id.begin()), id.size())) {
      return actor_names_.end();
    }
    return it;
  }

  static void SendAck(Connection& conn, uint64_t request_id) {
    OutMessage out;
    auto env = out.Init();
    env.setRequestId(request_id);
    env.setAck();
    conn.Send(out.builder());
  }

  static void FillActorName(proto::ActorName::Builder reply, const std::string& name,
                            const ActorNameEntry& entry) {
    reply.setOk(true);
    reply.setName(name);
    reply.setActorId(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(entry.id.data()),
                                         entry.id.size()));
    reply.setOwnerAddress(entry.owner);
    reply.setAddress(entry.address);
  }

  void OnClose(Connection& conn, const absl::Status& why) {
    if (why.code() == absl::StatusCode::kInvalidArgument ||
        why.code() == absl::StatusCode::kResourceExhausted ||
        why.code() == absl::StatusCode::kPermissionDenied ||
        why.code() == absl::StatusCode::kDeadlineExceeded) {
      LogRejectedConnection("head", conn.peer(), why);
    }
    bool changed = false;
    for (auto& [id, entry] : nodes_) {
      if (entry.conn_id == conn.id() && entry.alive) {
        LUMEN_LOG(WARNING) << "node " << id.Hex().substr(0, 12) << " is dead (connection lost)";
        MarkDead(id, entry);
        changed = true;
      }
    }
    if (changed) {
      BroadcastView();
      SchedulePending();
    }
    kv_.DropConnection(conn.id());
    // Its parked placement-group waits go with it.
    if (parked_waits_.erase(conn.id()) > 0) {
      for (auto& [group_id, g] : groups_) {
        std::erase_if(g.waiters, [&](const GroupEntry::Waiter& w) {
          if (w.conn_id != conn.id()) return false;
          w.timer->cancel();
          return true;
        });
      }
    }
    auto keep = conns_[conn.id()];
    conns_.erase(conn.id());
    asio::post(io_, [keep] {});
  }

  HeadOptions options_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  asio::signal_set signals_;
  std::optional<asio::posix::stream_descriptor> parent_watch_;
  std::string address_;
  bool require_token_ = false;
  HelloAdmission admission_{ServerLimits::FromEnv(), "head"};
  HeadLimits limits_ = HeadLimits::FromEnv();
  size_t live_groups_ = 0;  // groups not REMOVED
  // Placement-group waits parked per connection (bounded by limits_).
  absl::flat_hash_map<uint64_t, size_t> parked_waits_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Connection>> conns_;
  std::map<NodeId, NodeEntry> nodes_;
  // The key-value store, and a timer per parked wait, by (connection, request id).
  KvService kv_;
  std::map<std::string, ActorNameEntry> actor_names_;
  asio::steady_timer health_timer_;
  absl::flat_hash_set<NodeId> dead_nodes_;
  std::vector<JobId> ended_jobs_;
  std::map<std::string, GroupEntry> groups_;
  std::vector<std::string> group_order_;  // creation order
  uint64_t next_request_id_ = 1;
  uint64_t rollbacks_ = 0;
  // Phase requests sent to nodes: request id -> (connection, callback).
  absl::flat_hash_map<uint64_t, std::pair<uint64_t, std::function<void(bool, std::string)>>>
      bundle_requests_;
};

}  // namespace

HeadLimits HeadLimits::FromEnv() {
  HeadLimits limits;
  auto read = [](const char* name, size_t* value) {
    const char* v = std::getenv(name);
    uint64_t parsed = 0;
    if (v != nullptr && absl::SimpleAtoi(v, &parsed)) *value = static_cast<size_t>(parsed);
  };
  read("LUMEN_MAX_NAMED_ACTORS", &limits.max_named_actors);
  read("LUMEN_MAX_PLACEMENT_GROUPS", &limits.max_placement_groups);
  read("LUMEN_MAX_BUNDLES_PER_GROUP", &limits.max_bundles_per_group);
  read("LUMEN_MAX_PARKED_REQUESTS", &limits.max_parked_requests_per_connection);
  return limits;
}

int RunHeadService(const HeadOptions& options) {
  HeadService head(options);
  return head.Run();
}

}  // namespace lumen::runtime
