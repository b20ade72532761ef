#include "group.h"

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include "lumen/lumen.h"

namespace lumen::collective::internal {
namespace {

// The IP the node's processes listen on, from the cluster view (loopback when
// Lumen is not initialized or the node is not listed).
std::string NodeHost() {
  if (const char* host = std::getenv("LUMEN_COLLECTIVE_HOST"); host && *host) return host;
  try {
    std::string me = lumen::GetNodeId();
    for (const auto& node : lumen::Nodes()) {
      if (node.id != me) continue;
      // "host:port;/unix/path"
      std::string tcp = node.address.substr(0, node.address.find(';'));
      auto colon = tcp.rfind(':');
      if (colon != std::string::npos && colon > 0) return tcp.substr(0, colon);
    }
  } catch (const lumen::Error&) {
  }
  return "127.0.0.1";
}

// "[127.0.0.1]:4242" out of a Gloo address or error text, from the first '['.
std::vector<std::string> HostPorts(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = text.find('[', pos)) != std::string::npos) {
    size_t close = text.find("]:", pos);
    if (close == std::string::npos) break;
    size_t end = close + 2;
    while (end < text.size() && isdigit(static_cast<unsigned char>(text[end]))) ++end;
    out.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

// What each member published at init: its pid, host and Gloo listening address.
struct Member {
  int pid = 0;
  std::string hostname;
  std::string address;  // "[ip]:port"
};

// False once `pid` has exited, also while it is a zombie not yet reaped.
bool ProcessAlive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return true;
  char state = line[close + 2];
  return state != 'Z' && state != 'X';
}

std::string LocalHostname() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

// Gloo writes to its sockets with writev, which raises SIGPIPE when the peer
// is gone; by default that kills this process too, so one member's death
// would take the others with it instead of failing their calls. Ignored
// unless the program installed its own handler.
void IgnoreSigpipeUnlessHandled() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) != 0) return;
  if (current.sa_handler != SIG_DFL || (current.sa_flags & SA_SIGINFO) != 0) return;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  if (::sigaction(SIGPIPE, &ignore, nullptr) != 0) {
    // Left at the default: a peer's death may then end this process too.
  }
}

}  // namespace

void Pending::Finish(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mu_);
  error_ = error;
  done_ = true;
  cv_.notify_all();
}

void Pending::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool Pending::Ready() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Group::Group(GroupOptions options, std::string prefix)
    : options_(std::move(options)), store_(std::move(prefix), options_.timeout) {}

Group::~Group() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (executor_.joinable()) executor_.join();
}

void Group::Connect() {
  try {
#ifdef LUMEN_WITH_NCCL
    if (options_.backend == Backend::kNccl) {
      nccl_ = NcclConnect(options_, store_);
      lumen::kv::Put(store_.prefix() + "member/" + std::to_string(options_.rank),
                     std::to_string(::getpid()) + " " + LocalHostname() + " -",
                     kCollectiveNamespace);
      return;
    }
#endif
    IgnoreSigpipeUnlessHandled();
    gloo::transport::tcp::attr attr;
    attr.hostname = NodeHost();
    device_ = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options_.rank, options_.world_size);
    context->setTimeout(options_.timeout);
    context->connectFullMesh(store_, device_);
    context_ = context;
    // Who is who, for naming a failed rank later.
    std::string address;
    for (int i = 0; i < options_.world_size && address.empty(); ++i) {
      if (i == options_.rank) continue;
      auto hp = HostPorts(context_->getPair(i)->address().str());
      if (!hp.empty()) address = hp[0];
    }
    lumen::kv::Put(store_.prefix() + "member/" + std::to_string(options_.rank),
                   std::to_string(::getpid()) + " " + LocalHostname() + " " + address,
                   kCollectiveNamespace);
  } catch (const CollectiveError& e) {
    throw CollectiveError(Describe("init") + e.what());
  } catch (const std::exception& e) {
    throw CollectiveError(Describe("init") + e.what());
  }
}

void Group::RunSync(const char* what, const std::function<void(uint32_t)>& op) {
  uint32_t tag;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.empty() && !running_; });
    CheckUsable(what);
    running_ = true;
    tag = tag_ += 2;  // tag - 1: the size check; tag: the operation
  }
  std::exception_ptr error = Execute(what, tag, op);
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
    cv_.notify_all();
  }
  if (error) std::rethrow_exception(error);
}

std::shared_ptr<Pending> Group::RunAsync(const char* what, std::function<void(uint32_t)> op) {
  auto pending = std::make_shared<Pending>();
  std::lock_guard<std::mutex> lock(mu_);
  CheckUsable(what);
  tag_ += 2;
  queue_.push_back({what, tag_, std::move(op), pending});
  if (!executor_.joinable()) executor_ = std::thread([this] { ExecutorLoop(); });
  cv_.notify_all();
  return pending;
}

std::vector<CallRecord> Group::Agree(uint32_t tag, const char* what, const CallShape& shape,
                                     const void* payload, size_t payload_bytes) {
  std::vector<CallRecord> records =
      ExchangeRecords(context_, tag - 1, options_.timeout, MakeRecord(shape, payload, payload_bytes));
  std::string mismatch = ShapeMismatch(records, records.size() == 1 ? 0 : options_.rank);
  if (!mismatch.empty()) {
    throw CollectiveError(Describe(what) + "the ranks called it with different shapes (" +
                          mismatch + "); no buffer was changed");
  }
  return records;
}

std::shared_ptr<void> Group::Cached(const CallShape& shape) {
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (it->first == shape) {
      auto entry = *it;
      cache_.erase(it);
      cache_.push_front(entry);
      return entry.second;
    }
  }
  return nullptr;
}

void Group::Cache(const CallShape& shape, std::shared_ptr<void> entry) {
  constexpr size_t kEntries = 2;
  cache_.emplace_front(shape, std::move(entry));
  while (cache_.size() > kEntries) cache_.pop_back();
}

uint64_t Group::NextSendSeq(int dst) {
  std::lock_guard<std::mutex> lock(mu_);
  return send_seq_[dst]++;
}

uint64_t Group::NextRecvSeq(int src) {
  std::lock_guard<std::mutex> lock(mu_);
  return recv_seq_[src]++;
}

void Group::CheckUsable(const char* what) {
  if (!broken_.empty()) {
    throw CollectiveError(Describe(what) + "the group is broken since an earlier failure (" +
                          broken_ + "); destroy it and build a new one");
  }
}

std::string Group::Describe(const char* what) const {
  return "collective group '" + options_.name + "' (rank " + std::to_string(options_.rank) +
         " of " + std::to_string(options_.world_size) + "): " + what + " failed: ";
}

std::exception_ptr Group::Execute(const char* what, uint32_t tag,
                           const std::function<void(uint32_t)>& op) {
  try {
    op(tag);
    return nullptr;
  } catch (const CollectiveError&) {
    return std::current_exception();  // a usage error: the group stays usable
  } catch (const std::exception& e) {
    std::string why = Diagnose(e.what());
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (broken_.empty()) broken_ = why;
    }
    return std::make_exception_ptr(CollectiveError(Describe(what) + why));
  }
}

// A rank that failed: one whose process is gone (members on this
// host are checked directly), else the one whose address the Gloo error names.
std::string Group::Diagnose(const std::string& gloo_error) {
  std::map<int, Member> members;
  std::string host = LocalHostname();
  for (int r = 0; r < options_.world_size; ++r) {
    if (r == options_.rank) continue;
    try {
      auto v = lumen::kv::Get(store_.prefix() + "member/" + std::to_string(r), kCollectiveNamespace);
      if (!v) continue;
      std::istringstream in(*v);
      Member m;
      in >> m.pid >> m.hostname >> m.address;
      members[r] = m;
    } catch (const lumen::Error&) {
    }
  }
  // A killed process resets its sockets a moment before it leaves the
  // process table: look again for up to a second (only on this failure path).
  bool any_local = false;
  for (const auto& [r, m] : members) any_local |= m.hostname == host && m.pid > 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (any_local) {
    for (const auto& [r, m] : members) {
      if (m.hostname == host && m.pid > 0 && !ProcessAlive(m.pid)) {
        return "rank " + std::to_string(r) + " (pid " + std::to_string(m.pid) + ") died (" +
               gloo_error + ")";
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (const auto& hp : HostPorts(gloo_error)) {
    for (const auto& [r, m] : members) {
      if (m.address == hp) {
        return "rank " + std::to_string(r) + " (pid " + std::to_string(m.pid) + " on " +
               m.hostname + ") failed or is unreachable (" + gloo_error + ")";
      }
    }
  }
  return "a member failed or did not answer within " + std::to_string(options_.timeout.count()) +
         " ms (" + gloo_error + ")";
}

void Group::ExecutorLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !running_); });
    if (queue_.empty()) return;  // stopping, nothing left
    Queued item = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    std::exception_ptr error;
    if (!broken_.empty()) {
      error = std::make_exception_ptr(CollectiveError(
          Describe(item.what) + "the group is broken since an earlier failure (" + broken_ + ")"));
    }
    lock.unlock();
    if (!error) error = Execute(item.what, item.tag, item.op);
    item.pending->Finish(error);
    lock.lock();
    running_ = false;
    cv_.notify_all();
  }
}


}  // namespace lumen::collective::internal
