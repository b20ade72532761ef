// lumen::collective on Gloo: one gloo::rendezvous::Context per group, met
// through the head's key-value store; every operation a Gloo algorithm.
#include "lumen/train/collective.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "kv_rendezvous_store.h"
#ifdef LUMEN_WITH_NCCL
#include "nccl_backend.h"
#endif

namespace lumen::collective {
namespace internal {
namespace {

// Gloo's collectives use slot prefixes 0x01..0x08; point-to-point uses this.
constexpr uint8_t kP2pSlotPrefix = 0x20;
constexpr uint8_t kP2pHeaderSlotPrefix = 0x21;
// All-reduce below this many bytes uses bcube (few rounds, latency-bound);
// at and above it ring (bandwidth-optimal). doc/collective.md.
constexpr size_t kRingThresholdBytes = 256 << 10;

size_t ElementSize(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
  }
  return 0;
}

int64_t Count(const Buffer& b) { return static_cast<int64_t>(b.count); }

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
  }
  return "?";
}

template <class F>
decltype(auto) Dispatch(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt64: return f(int64_t{});
  }
  return f(float{});
}

template <class T>
gloo::AllreduceOptions::Func ReduceFunc(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProduct:
      return [](void* c, const void* a, const void* b, size_t n) { gloo::product<T>(c, a, b, n); };
    case ReduceOp::kMin:
      return [](void* c, const void* a, const void* b, size_t n) { gloo::min<T>(c, a, b, n); };
    case ReduceOp::kMax:
      return [](void* c, const void* a, const void* b, size_t n) { gloo::max<T>(c, a, b, n); };
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      break;
  }
  return [](void* c, const void* a, const void* b, size_t n) { gloo::sum<T>(c, a, b, n); };
}

template <class T>
void DivideBy(void* data, size_t n, int world) {
  T* p = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(world));
}

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

}  // namespace

// One asynchronous operation's completion, shared by the caller's future and
// the group's executor thread.
class Pending {
 public:
  void Finish(std::exception_ptr error) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = error;
    done_ = true;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }
  bool Ready() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// One joined group in this process. Operations run one at a time in call
// order: synchronous ones on the caller's thread, asynchronous ones on the
// group's executor thread (started on first use). Thread-safe.
class Group {
 public:
  Group(GroupOptions options, std::string prefix)
      : options_(std::move(options)), store_(std::move(prefix), options_.timeout) {}

  // Runs the operations still queued (they fail fast once the group is
  // broken), then stops the executor.
  ~Group() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      cv_.notify_all();
    }
    if (executor_.joinable()) executor_.join();
  }

  // Rendezvous: publishes this member, connects the full mesh. Throws CollectiveError.
  void Connect() {
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

  const GroupOptions& options() const { return options_; }
  KvRendezvousStore& store() { return store_; }

  // Runs `op` (given the op's tag) on the caller's thread once every earlier
  // operation finished.
  void RunSync(const char* what, const std::function<void(uint32_t)>& op) {
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

  // Queues `op` for the executor thread; the result completes when it ran.
  std::shared_ptr<Pending> RunAsync(const char* what, std::function<void(uint32_t)> op) {
    auto pending = std::make_shared<Pending>();
    std::lock_guard<std::mutex> lock(mu_);
    CheckUsable(what);
    tag_ += 2;
    queue_.push_back({what, tag_, std::move(op), pending});
    if (!executor_.joinable()) executor_ = std::thread([this] { ExecutorLoop(); });
    cv_.notify_all();
    return pending;
  }

  std::shared_ptr<gloo::Context> context() const { return context_; }
#ifdef LUMEN_WITH_NCCL
  // The NCCL communicator of a kNccl group, else nullptr.
  NcclComm* nccl() const { return nccl_.get(); }
#endif
  int rank() const { return options_.rank; }
  int size() const { return options_.world_size; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }

  // Point-to-point sequence numbers: the n-th send from a to b meets the n-th
  // receive at b from a.
  uint64_t NextSendSeq(int dst) {
    std::lock_guard<std::mutex> lock(mu_);
    return send_seq_[dst]++;
  }
  uint64_t NextRecvSeq(int src) {
    std::lock_guard<std::mutex> lock(mu_);
    return recv_seq_[src]++;
  }

  // Checks that every rank called the same operation with the same shape
  // (GroupOptions::verify_sizes): one 64-byte all-reduce (max) of the shape
  // and its negation under tag `tag - 1`. Gloo aborts a process that receives
  // more bytes than it expects, so this runs before any data moves. Throws
  // CollectiveError on every rank when they differ; the group stays usable.
  void Verify(uint32_t tag, const char* what, std::initializer_list<int64_t> shape) {
    if (!options_.verify_sizes || options_.world_size == 1 || !context_) return;
    int64_t sig[8] = {0};
    size_t k = 0;
    for (int64_t v : shape) {
      if (k >= 4) break;
      sig[k] = v;
      sig[4 + k] = -v;
      ++k;
    }
    int64_t mine[8];
    std::copy(sig, sig + 8, mine);
    gloo::AllreduceOptions opts(context_);
    opts.setOutput<int64_t>(sig, 8);
    opts.setReduceFunction(
        [](void* c, const void* a, const void* b, size_t n) { gloo::max<int64_t>(c, a, b, n); });
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
    opts.setTag(tag - 1);
    opts.setTimeout(options_.timeout);
    gloo::allreduce(opts);
    if (!std::equal(sig, sig + 8, mine)) {
      throw CollectiveError(Describe(what) + "the ranks called it with different shapes (this rank: " +
                            ShapeText(mine) + "; largest on some rank: " + ShapeText(sig) +
                            "); nothing was sent");
    }
  }

 private:
  struct Queued {
    const char* what;
    uint32_t tag;
    std::function<void(uint32_t)> op;
    std::shared_ptr<Pending> pending;
  };

  static std::string ShapeText(const int64_t* sig) {
    static const char* kTypes[] = {"float32", "float64", "int32", "int64"};
    std::string type = sig[2] >= 0 && sig[2] < 4 ? kTypes[sig[2]] : "?";
    return "operation " + std::to_string(sig[0]) + ", " + std::to_string(sig[1]) + " elements of " +
           type + ", parameter " + std::to_string(sig[3]);
  }

  void CheckUsable(const char* what) {
    if (!broken_.empty()) {
      throw CollectiveError(Describe(what) + "the group is broken since an earlier failure (" +
                            broken_ + "); destroy it and build a new one");
    }
  }

  std::string Describe(const char* what) const {
    return "collective group '" + options_.name + "' (rank " + std::to_string(options_.rank) +
           " of " + std::to_string(options_.world_size) + "): " + what + " failed: ";
  }

  std::exception_ptr Execute(const char* what, uint32_t tag,
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

  // Names the rank that failed: one whose process is gone (members on this
  // host are checked directly), else the one whose address the Gloo error names.
  std::string Diagnose(const std::string& gloo_error) {
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

  void ExecutorLoop() {
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

  GroupOptions options_;
  KvRendezvousStore store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
#ifdef LUMEN_WITH_NCCL
  NcclCommPtr nccl_;
#endif

  std::mutex mu_;
  std::condition_variable cv_;
  // State below is protected by mu_.
  std::deque<Queued> queue_;
  bool running_ = false;
  bool stopping_ = false;
  uint32_t tag_ = 0;
  std::string broken_;  // why, once an operation failed
  std::map<int, uint64_t> send_seq_;
  std::map<int, uint64_t> recv_seq_;
  std::thread executor_;
};

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Group>> groups;  // shared: ops hold it while running
  std::map<std::string, int> destroyed;                  // name -> times destroyed here
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

std::shared_ptr<Group> FindGroup(const std::string& name) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.groups.find(name);
  if (it == r.groups.end()) {
    throw CollectiveError("collective group '" + name +
                          "' is not initialized in this process (call InitGroup or CreateGroup)");
  }
  return it->second;
}

void CheckRank(const Group& g, int rank, const char* role) {
  if (rank < 0 || rank >= g.size()) {
    throw CollectiveError("collective group '" + g.options().name + "': " + role + " " +
                          std::to_string(rank) + " is not a rank of a group of " +
                          std::to_string(g.size()));
  }
}

void CheckSameType(const Buffer& a, const Buffer& b, const char* what) {
  if (a.dtype != b.dtype) {
    throw CollectiveError(std::string(what) + ": input is " + DTypeName(a.dtype) +
                          " but output is " + DTypeName(b.dtype));
  }
}

// On NCCL groups, `body` does the operation there instead.
#ifdef LUMEN_WITH_NCCL
#define LUMEN_ON_NCCL(g, body) \
  if (::lumen::collective::internal::NcclComm* nccl = (g).nccl()) { body; return; }
#else
#define LUMEN_ON_NCCL(g, body)
#endif

void RunAllReduce(Group& g, Buffer data, ReduceOp op, uint32_t tag) {
  LUMEN_ON_NCCL(g, NcclAllReduce(*nccl, data, op));
  if (data.count == 0) return;
  Dispatch(data.dtype, [&](auto zero) {
    using T = decltype(zero);
    gloo::AllreduceOptions opts(g.context());
    opts.setOutput<T>(static_cast<T*>(data.data), data.count);
    opts.setReduceFunction(ReduceFunc<T>(op));
    opts.setAlgorithm(data.count * sizeof(T) >= kRingThresholdBytes
                          ? gloo::AllreduceOptions::Algorithm::RING
                          : gloo::AllreduceOptions::Algorithm::BCUBE);
    opts.setTag(tag);
    opts.setTimeout(g.timeout());
    gloo::allreduce(opts);
    if (op == ReduceOp::kAverage) DivideBy<T>(data.data, data.count, g.size());
  });
}

}  // namespace

void AllReduce(Buffer data, ReduceOp op, const std::string& group) {
  auto g = FindGroup(group);
  g->RunSync("all_reduce", [&](uint32_t tag) {
    g->Verify(tag, "all_reduce", {1, Count(data), static_cast<int64_t>(data.dtype), static_cast<int64_t>(op)});
    RunAllReduce(*g, data, op, tag);
  });
}

std::shared_ptr<Pending> AllReduceAsync(Buffer data, ReduceOp op, const std::string& group) {
  auto g = FindGroup(group);
  // The group outlives its queued operations: its destructor drains the queue.
  Group* raw = g.get();
  return g->RunAsync("all_reduce", [raw, data, op](uint32_t tag) {
    raw->Verify(tag, "all_reduce", {1, Count(data), static_cast<int64_t>(data.dtype), static_cast<int64_t>(op)});
    RunAllReduce(*raw, data, op, tag);
  });
}

void Wait(const std::shared_ptr<Pending>& pending) { pending->Wait(); }
bool Ready(const std::shared_ptr<Pending>& pending) { return pending->Ready(); }

void Broadcast(Buffer data, int root, const std::string& group) {
  auto g = FindGroup(group);
  CheckRank(*g, root, "broadcast root");
  g->RunSync("broadcast", [&](uint32_t tag) {
    LUMEN_ON_NCCL(*g, NcclBroadcast(*nccl, data, root));
    g->Verify(tag, "broadcast", {2, Count(data), static_cast<int64_t>(data.dtype), root});
    if (data.count == 0) return;
    Dispatch(data.dtype, [&](auto zero) {
      using T = decltype(zero);
      gloo::BroadcastOptions opts(g->context());
      opts.setOutput<T>(static_cast<T*>(data.data), data.count);
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(g->timeout());
      gloo::broadcast(opts);
    });
  });
}

void AllGather(Buffer input, Buffer output, const std::string& group) {
  auto g = FindGroup(group);
  CheckSameType(input, output, "all_gather");
  if (output.count != input.count * static_cast<size_t>(g->size())) {
    throw CollectiveError("collective group '" + group + "': all_gather output holds " +
                          std::to_string(output.count) + " elements, expected world size " +
                          std::to_string(g->size()) + " x " + std::to_string(input.count));
  }
  g->RunSync("all_gather", [&](uint32_t tag) {
    LUMEN_ON_NCCL(*g, NcclAllGather(*nccl, input, output));
    g->Verify(tag, "all_gather", {3, Count(input), static_cast<int64_t>(input.dtype), 0});
    if (input.count == 0) return;
    Dispatch(input.dtype, [&](auto zero) {
      using T = decltype(zero);
      gloo::AllgatherOptions opts(g->context());
      opts.setInput<T>(static_cast<T*>(input.data), input.count);
      opts.setOutput<T>(static_cast<T*>(output.data), output.count);
      opts.setTag(tag);
      opts.setTimeout(g->timeout());
      gloo::allgather(opts);
    });
  });
}

size_t ReduceScatterOffset(size_t count, int rank, int world) {
  size_t base = count / world, extra = count % world;
  return base * rank + std::min<size_t>(rank, extra);
}

void ReduceScatter(Buffer input, Buffer output, ReduceOp op, const std::string& group) {
  auto g = FindGroup(group);
  CheckSameType(input, output, "reduce_scatter");
  size_t mine = ReduceScatterCount(input.count, g->rank(), g->size());
  if (output.count != mine) {
    throw CollectiveError("collective group '" + group + "': reduce_scatter output holds " +
                          std::to_string(output.count) + " elements, rank " +
                          std::to_string(g->rank()) + " receives " + std::to_string(mine) +
                          " of " + std::to_string(input.count));
  }
  g->RunSync("reduce_scatter", [&](uint32_t tag) {
    LUMEN_ON_NCCL(*g, NcclReduceScatter(*nccl, input, output, op));
    g->Verify(tag, "reduce_scatter", {4, Count(input), static_cast<int64_t>(input.dtype), static_cast<int64_t>(op)});
    if (input.count == 0) return;
    // Gloo 0.5's new-style API has no reduce-scatter over arbitrary counts: an
    // all-reduce of a copy, then this rank's block.
    size_t es = ElementSize(input.dtype);
    std::vector<char> scratch(static_cast<const char*>(input.data),
                              static_cast<const char*>(input.data) + input.count * es);
    RunAllReduce(*g, Buffer{scratch.data(), input.count, input.dtype}, op, tag);
    std::memcpy(output.data, scratch.data() + ReduceScatterOffset(input.count, g->rank(), g->size()) * es,
                mine * es);
  });
}

void Reduce(Buffer data, int root, ReduceOp op, const std::string& group) {
  auto g = FindGroup(group);
  CheckRank(*g, root, "reduce root");
  g->RunSync("reduce", [&](uint32_t tag) {
    LUMEN_ON_NCCL(*g, NcclReduce(*nccl, data, root, op));
    g->Verify(tag, "reduce", {5, Count(data), static_cast<int64_t>(data.dtype), root * 8 + static_cast<int64_t>(op)});
    if (data.count == 0) return;
    Dispatch(data.dtype, [&](auto zero) {
      using T = decltype(zero);
      gloo::ReduceOptions opts(g->context());
      opts.setOutput<T>(static_cast<T*>(data.data), data.count);
      opts.setRoot(root);
      opts.setReduceFunction(ReduceFunc<T>(op));
      opts.setTag(tag);
      opts.setTimeout(g->timeout());
      gloo::reduce(opts);
      if (op == ReduceOp::kAverage && g->rank() == root) DivideBy<T>(data.data, data.count, g->size());
    });
  });
}

namespace {
// The slot of the seq-th message from `from` to `to`.
uint64_t P2pSlot(uint8_t prefix, uint64_t seq, int from, int to) {
  return gloo::Slot::build(prefix, static_cast<uint32_t>(seq * 2 + (from < to ? 0 : 1)));
}
}  // namespace

// Point to point: an 8-byte header (the payload's byte count) on the header
// slot, then the payload, so that a receiver whose buffer has another size
// fails with an error instead of Gloo aborting it.
void Send(Buffer data, int dst, const std::string& group) {
  auto g = FindGroup(group);
  CheckRank(*g, dst, "send destination");
  if (dst == g->rank()) throw CollectiveError("collective group '" + group + "': send to self");
  uint64_t seq = g->NextSendSeq(dst);
  g->RunSync("send", [&](uint32_t) {
    LUMEN_ON_NCCL(*g, NcclSend(*nccl, data, dst));
    uint64_t bytes = data.count * ElementSize(data.dtype);
    auto header = g->context()->createUnboundBuffer(&bytes, sizeof(bytes));
    header->send(dst, P2pSlot(kP2pHeaderSlotPrefix, seq, g->rank(), dst));
    if (bytes > 0) {
      auto buf = g->context()->createUnboundBuffer(data.data, bytes);
      buf->send(dst, P2pSlot(kP2pSlotPrefix, seq, g->rank(), dst));
      buf->waitSend(g->timeout());
    }
    header->waitSend(g->timeout());
  });
}

void Recv(Buffer data, int src, const std::string& group) {
  auto g = FindGroup(group);
  CheckRank(*g, src, "receive source");
  if (src == g->rank()) throw CollectiveError("collective group '" + group + "': receive from self");
  uint64_t seq = g->NextRecvSeq(src);
  g->RunSync("recv", [&](uint32_t) {
    LUMEN_ON_NCCL(*g, NcclRecv(*nccl, data, src));
    uint64_t expected = data.count * ElementSize(data.dtype), bytes = 0;
    auto header = g->context()->createUnboundBuffer(&bytes, sizeof(bytes));
    header->recv(src, P2pSlot(kP2pHeaderSlotPrefix, seq, src, g->rank()));
    header->waitRecv(g->timeout());
    if (bytes == 0 && expected == 0) return;
    std::vector<char> drain;
    void* into = data.data;
    if (bytes != expected) {
      drain.resize(bytes);  // take the message anyway, so the pair stays in step
      into = drain.data();
    }
    if (bytes > 0) {
      auto buf = g->context()->createUnboundBuffer(into, bytes);
      buf->recv(src, P2pSlot(kP2pSlotPrefix, seq, src, g->rank()));
      buf->waitRecv(g->timeout());
    }
    if (bytes != expected) {
      throw CollectiveError("collective group '" + group + "' (rank " + std::to_string(g->rank()) +
                            "): recv failed: rank " + std::to_string(src) + " sent " +
                            std::to_string(bytes) + " bytes into a buffer of " +
                            std::to_string(expected) + " bytes; the message was dropped");
    }
  });
}

void CreateGroup(const std::vector<std::shared_ptr<lumen::internal::RefHandle>>& actors,
                 const CreateGroupOptions& options);

}  // namespace internal

size_t ReduceScatterCount(size_t count, int rank, int world) {
  if (world <= 0 || rank < 0 || rank >= world) return 0;
  return count / world + (static_cast<size_t>(rank) < count % world ? 1 : 0);
}

void InitGroup(const GroupOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    throw CollectiveError("InitGroup: rank " + std::to_string(options.rank) +
                          " is not in a group of " + std::to_string(options.world_size));
  }
  if (options.name.empty() || options.name.find('/') != std::string::npos) {
    throw CollectiveError("InitGroup: a group name is non-empty and has no '/'");
  }
#ifndef LUMEN_WITH_NCCL
  if (options.backend == Backend::kNccl) {
    throw CollectiveError(
        "InitGroup: the NCCL backend is not available in this build (Lumen was built without "
        "CUDA and NCCL); use Backend::kGloo");
  }
#endif
  auto& registry = internal::GetRegistry();
  std::string prefix;
  {
    std::lock_guard<std::mutex> lock(registry.mu);
    if (registry.groups.contains(options.name)) {
      throw CollectiveError("InitGroup: collective group '" + options.name +
                            "' already exists in this process; DestroyGroup it first");
    }
    std::string id = options.rendezvous_id.empty()
                         ? "g" + std::to_string(registry.destroyed[options.name])
                         : options.rendezvous_id;
    prefix = options.name + "/" + id + "/";
  }
  auto group = std::make_shared<internal::Group>(options, prefix);
  group->Connect();
  std::lock_guard<std::mutex> lock(registry.mu);
  if (!registry.groups.emplace(options.name, group).second) {
    throw CollectiveError("InitGroup: collective group '" + options.name +
                          "' was created meanwhile by another thread");
  }
}

void DestroyGroup(const std::string& name) {
  auto& registry = internal::GetRegistry();
  std::shared_ptr<internal::Group> group;
  {
    std::lock_guard<std::mutex> lock(registry.mu);
    auto it = registry.groups.find(name);
    if (it == registry.groups.end()) return;
    group = std::move(it->second);
    registry.groups.erase(it);
    ++registry.destroyed[name];
  }
  try {
    group->store().RemoveAll();
  } catch (const lumen::Error&) {
    // The head is gone too: nothing left to clean.
  }
}

bool IsGroupInitialized(const std::string& name) {
  auto& registry = internal::GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  return registry.groups.contains(name);
}

int GetRank(const std::string& name) { return internal::FindGroup(name)->rank(); }
int GetWorldSize(const std::string& name) { return internal::FindGroup(name)->size(); }

void Barrier(const std::string& group) {
  auto g = internal::FindGroup(group);
  g->RunSync("barrier", [&](uint32_t tag) {
    LUMEN_ON_NCCL(*g, internal::NcclBarrier(*nccl));
    gloo::BarrierOptions opts(g->context());
    opts.setTag(tag);
    opts.setTimeout(g->timeout());
    gloo::barrier(opts);
  });
}

}  // namespace lumen::collective
