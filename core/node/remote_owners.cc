// RemoteOwners: see remote_owners.h. Node daemon io thread.
#include "core/node/remote_owners.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/address.h"
#include "lumen/common/logging.h"

namespace lumen::node {

RemoteOwners::RemoteOwners(Options options)
    : options_(std::move(options)), timer_(*options_.io), alive_(std::make_shared<bool>(true)) {}

RemoteOwners::~RemoteOwners() { *alive_ = false; }

size_t RemoteOwners::disconnected() const {
  size_t n = 0;
  for (const auto& [worker, owner] : owners_) n += owner.conn == 0;
  return n;
}

absl::StatusOr<uint64_t> RemoteOwners::OnHello(const WorkerId& worker, const std::string& node,
                                               const JobId& job, const std::string& listen_address,
                                               bool is_driver, uint64_t conn) {
  io_thread_.Check("RemoteOwners");
  if (!node.empty() && dead_nodes_.Contains(node)) {
    return absl::FailedPreconditionError(
        absl::StrCat("its node ", NodeId::FromBinary(node).Hex().substr(0, 12),
                     " was declared dead: this cluster gave up on its processes"));
  }
  auto [it, inserted] = owners_.try_emplace(worker);
  Owner& owner = it->second;
  if (inserted) {
    owner.key = conn;
  } else {
    if (owner.conn != 0) by_conn_.erase(owner.conn);  // a second link: the newest counts
    LUMEN_LOG(INFO) << "remote owner " << worker.Hex().substr(0, 12)
                    << " is back on a new connection; its objects here stay";
  }
  owner.conn = conn;
  owner.job = job;
  owner.node = node;
  owner.listen_address = listen_address;
  owner.is_driver = is_driver;
  by_conn_[conn] = worker;
  return owner.key;
}

void RemoteOwners::OnClosed(uint64_t conn) {
  io_thread_.Check("RemoteOwners");
  auto it = by_conn_.find(conn);
  if (it == by_conn_.end()) return;
  auto owner = owners_.find(it->second);
  by_conn_.erase(it);
  if (owner == owners_.end()) return;
  owner->second.conn = 0;
  if (owner->second.listen_address.empty()) {
    // Nothing to probe: an owner without an owner service is gone with its link.
    Gone gone{owner->second.key, owner->second.job, owner->second.is_driver,
              "its connection closed and it has no address to check"};
    owners_.erase(owner);
    options_.gone(gone);
    return;
  }
  ScheduleProbes();
}

void RemoteOwners::EndJob(const JobId& job) {
  io_thread_.Check("RemoteOwners");
  absl::erase_if(owners_, [&](const auto& entry) {
    if (entry.second.job != job) return false;
    if (entry.second.conn != 0) by_conn_.erase(entry.second.conn);
    return true;
  });
}

void RemoteOwners::NodeDied(const std::string& node) {
  io_thread_.Check("RemoteOwners");
  if (node.empty()) return;
  dead_nodes_.Insert(node);
  std::vector<Gone> gone;
  absl::erase_if(owners_, [&](const auto& entry) {
    const Owner& owner = entry.second;
    if (owner.node != node) return false;
    if (owner.conn != 0) by_conn_.erase(owner.conn);
    gone.push_back({owner.key, owner.job, owner.is_driver,
                    absl::StrCat("its node ", NodeId::FromBinary(node).Hex().substr(0, 12),
                                 " was declared dead"),
                    owner.conn});
    return true;
  });
  for (const Gone& g : gone) {
    LUMEN_LOG(INFO) << "remote owner with key " << g.key << " died: " << g.why
                    << "; its objects here go";
    options_.gone(g);
  }
}

void RemoteOwners::ScheduleProbes() {
  if (timer_armed_) return;
  // The first check soon (a killed owner's pid is freed within milliseconds),
  // then once per period while any owner is away.
  timer_armed_ = true;
  timer_.expires_after(options_.probe_period);
  timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (!*alive || ec) return;
    timer_armed_ = false;
    ProbeAll();
  });
}

void RemoteOwners::ProbeAll() {
  bool away = false;
  for (auto& [worker, owner] : owners_) {
    if (owner.conn != 0) continue;
    away = true;
    if (owner.probing) continue;
    owner.probing = true;
    AsyncConnectToAddress(
        *options_.io, owner.listen_address, options_.session_dir, options_.connect_timeout,
        [this, alive = alive_, worker = worker, key = owner.key](absl::StatusOr<Socket> socket) {
          if (!*alive) return;
          // An accepted probe closes at once (the owner sees a peer without a hello).
          OnProbed(worker, key, socket.ok() ? "" : std::string(socket.status().message()));
        });
  }
  if (away) ScheduleProbes();
}

void RemoteOwners::OnProbed(const WorkerId& worker, uint64_t key, const std::string& error) {
  auto it = owners_.find(worker);
  if (it == owners_.end() || it->second.key != key) return;  // ended meanwhile
  Owner& owner = it->second;
  owner.probing = false;
  if (owner.conn != 0) return;  // back meanwhile
  // Only a refusal is a death: nothing listens where its owner service did
  // (TCP: connection refused; Unix: the socket file is gone or refuses). A
  // time-out or an unreachable network says nothing about the process.
  const bool dead = absl::StrContains(error, "refused") ||
                    absl::StrContains(error, "No such file");
  if (!dead) return;
  Gone gone{owner.key, owner.job, owner.is_driver,
            absl::StrCat("its owner service at ", owner.listen_address, " is gone (", error, ")")};
  owners_.erase(it);
  LUMEN_LOG(INFO) << "remote owner " << worker.Hex().substr(0, 12) << " died: " << gone.why
                  << "; its objects here go";
  options_.gone(gone);
}

}  // namespace lumen::node
