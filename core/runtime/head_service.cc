#include "core/runtime/head_service.h"

#include <signal.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <map>
#include <memory>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/connection.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/ids.h"
#include "lumen/common/logging.h"

namespace lumen::runtime {
namespace {

namespace asio = boost::asio;

class HeadService {
 public:
  explicit HeadService(const HeadOptions& options)
      : options_(options), acceptor_(io_), signals_(io_, SIGTERM, SIGINT) {}

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
      auto conn = Connection::Create(
          Socket(io_, asio::generic::stream_protocol(protocol.family(), protocol.protocol()), fd));
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
    entry.conn_id = conn.id();
    entry.alive = true;
    entry.stats_frame.clear();
    AppendFrame(copy, &entry.stats_frame);
  }

  void OnFrame(Connection& conn, proto::Envelope::Reader msg) {
    bool& hello_seen = std::any_cast<bool&>(conn.context());
    if (!hello_seen) {
      if (!msg.isHello() || msg.getHello().getProtocolVersion() != proto::PROTOCOL_VERSION) {
        conn.Close(absl::PermissionDeniedError("first frame was not a valid hello"));
        return;
      }
      if (require_token_ && msg.getHello().getToken() != options_.token) {
        conn.Close(absl::PermissionDeniedError(
            msg.getHello().getToken().size() == 0 ? "connection without the cluster token"
                                                  : "connection with a wrong cluster token"));
        return;
      }
      hello_seen = true;
      return;
    }
    switch (msg.which()) {
      case proto::Envelope::REGISTER_NODE:
        StoreReport(conn, msg.getRegisterNode());
        return;
      case proto::Envelope::REPORT_NODE:
        StoreReport(conn, msg.getReportNode());
        return;
      case proto::Envelope::GET_NODES: {
        capnp::MallocMessageBuilder out;
        auto env = out.initRoot<proto::Envelope>();
        env.setRequestId(msg.getRequestId());
        auto list = env.initNodes(nodes_.size());
        size_t i = 0;
        for (auto& [id, entry] : nodes_) {
          const auto* words = reinterpret_cast<const capnp::word*>(entry.stats_frame.data() +
                                                                   kFrameHeaderBytes);
          size_t n = (entry.stats_frame.size() - kFrameHeaderBytes) / sizeof(capnp::word);
          capnp::FlatArrayMessageReader reader(kj::arrayPtr(words, n));
          list.setWithCaveats(i, reader.getRoot<proto::NodeStats>());
          list[i].setAlive(entry.alive);
          ++i;
        }
        conn.Send(out);
        return;
      }
      case proto::Envelope::KV_PUT: {
        auto kv = msg.getKvPut();
        auto v = kv.getValue();
        kv_[kv.getKey().cStr()] = std::string(reinterpret_cast<const char*>(v.begin()), v.size());
        SendAck(conn, msg.getRequestId());
        return;
      }
      case proto::Envelope::KV_GET: {
        OutMessage out;
        auto env = out.Init();
        env.setRequestId(msg.getRequestId());
        auto reply = env.initKvReply();
        reply.setKey(msg.getKvGet());
        auto it = kv_.find(msg.getKvGet().cStr());
        reply.setFound(it != kv_.end());
        if (it != kv_.end()) {
          reply.setValue(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(it->second.data()),
                                             it->second.size()));
        }
        conn.Send(out.builder());
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
      default:
        LUMEN_LOG(WARNING) << "head: ignoring an unexpected message";
    }
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
        why.code() == absl::StatusCode::kPermissionDenied) {
      LUMEN_LOG(WARNING) << "head closed connection " << conn.id() << ": " << why;
    }
    for (auto& [id, entry] : nodes_) {
      if (entry.conn_id == conn.id() && entry.alive) {
        entry.alive = false;
        LUMEN_LOG(INFO) << "node " << id.Hex().substr(0, 12) << " is dead (connection lost)";
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
  absl::flat_hash_map<uint64_t, std::shared_ptr<Connection>> conns_;
  std::map<NodeId, NodeEntry> nodes_;
  std::map<std::string, std::string> kv_;
  std::map<std::string, ActorNameEntry> actor_names_;
};

}  // namespace

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  return !ec && address.is_loopback();
}

int RunHeadService(const HeadOptions& options) {
  HeadService head(options);
  return head.Run();
}

}  // namespace lumen::runtime
