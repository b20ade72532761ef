#include "gloo_ops.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "element_types.h"

namespace lumen::collective::internal {
namespace {

// Gloo's collectives use slot prefixes 0x01..0x08; point-to-point uses these.
constexpr uint8_t kP2pSlotPrefix = 0x20;
constexpr uint8_t kP2pHeaderSlotPrefix = 0x21;
// All-reduce below this many bytes uses bcube (few rounds, latency-bound);
// at and above it ring (bandwidth-optimal). doc/collective.md.
constexpr size_t kRingThresholdBytes = 256 << 10;

size_t Bytes(const Buffer& b) { return b.count * ElementSize(b.dtype); }
bool Inline(const Buffer& b) { return Bytes(b) <= kInlineBytes; }

CallShape Shape(CallKind kind, const Buffer& b, int64_t root, int64_t op) {
  return CallShape{kind, static_cast<int64_t>(b.count), b.dtype, root, op};
}

// The shape check and, for inline calls, the data of every rank; nothing for
// a larger call of a group that does not check (verify_sizes off).
std::vector<CallRecord> Agree(Group& g, uint32_t tag, const char* what, const CallShape& shape,
                              const Buffer& data) {
  bool inline_data = Inline(data);
  if (!inline_data && !g.options().verify_sizes) return {};
  return g.Agree(tag, what, shape, inline_data ? data.data : nullptr,
                 inline_data ? Bytes(data) : 0);
}

// out = records[0] (op) records[1] (op) ... in rank order, so that every rank
// computes the bit-identical result.
template <class T>
void ReduceRecords(const std::vector<CallRecord>& records, size_t n, ReduceOp op, void* out,
                   int world) {
  std::memcpy(out, records[0].payload, n * sizeof(T));
  auto combine = ReduceFunc<T>(op);
  for (size_t r = 1; r < records.size(); ++r) combine(out, out, records[r].payload, n);
  if (op == ReduceOp::kAverage) DivideBy<T>(out, n, world);
}

void RunGlooAllReduce(Group& g, uint32_t tag, Buffer data, ReduceOp op) {
  DispatchHost(data.dtype, [&](auto zero) {
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

template <class T>
const gloo::ReductionFunction<T>* ReductionOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProduct: return gloo::ReductionFunction<T>::product;
    case ReduceOp::kMin: return gloo::ReductionFunction<T>::min;
    case ReduceOp::kMax: return gloo::ReductionFunction<T>::max;
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      break;
  }
  return gloo::ReductionFunction<T>::sum;
}

// Gloo's ReduceScatterHalvingDoubling built for one shape with its own copy
// of the input (it reduces in place and leaves this rank's block at the
// front). Its slots come from the context's own counter, which every rank
// advances alike since every rank builds plans at the same calls. Used by one
// operation at a time.
class ReduceScatterPlan {
 public:
  virtual ~ReduceScatterPlan() = default;
  // Reduce-scatters `input` (the plan's count); writes this rank's `mine`
  // elements to `output`.
  virtual void Run(const void* input, void* output, size_t mine) = 0;
};

template <class T>
class TypedReduceScatterPlan : public ReduceScatterPlan {
 public:
  TypedReduceScatterPlan(Group& g, size_t count, ReduceOp op) : scratch_(count) {
    std::vector<int> counts(g.size());
    for (int r = 0; r < g.size(); ++r) {
      counts[r] = static_cast<int>(ReduceScatterCount(count, r, g.size()));
    }
    algorithm_ = std::make_unique<gloo::ReduceScatterHalvingDoubling<T>>(
        g.context(), std::vector<T*>{scratch_.data()}, static_cast<int>(count), counts,
        ReductionOf<T>(op));
  }
  void Run(const void* input, void* output, size_t mine) override {
    std::memcpy(scratch_.data(), input, scratch_.size() * sizeof(T));
    algorithm_->run();
    if (mine > 0) std::memcpy(output, scratch_.data(), mine * sizeof(T));  // may be null
  }

 private:
  std::vector<T> scratch_;
  std::unique_ptr<gloo::ReduceScatterHalvingDoubling<T>> algorithm_;
};

size_t ReduceScatterOffset(size_t count, int rank, int world) {
  size_t base = count / world, extra = count % world;
  return base * rank + std::min<size_t>(rank, extra);
}

}  // namespace

void GlooAllReduce(Group& g, uint32_t tag, Buffer data, ReduceOp op) {
  auto records = Agree(g, tag, "all_reduce",
                       Shape(CallKind::kAllReduce, data, -1, static_cast<int64_t>(op)), data);
  if (data.count == 0) return;
  if (Inline(data)) {
    DispatchHost(data.dtype, [&](auto zero) {
      ReduceRecords<decltype(zero)>(records, data.count, op, data.data, g.size());
    });
    return;
  }
  RunGlooAllReduce(g, tag, data, op);
}

void GlooBroadcast(Group& g, uint32_t tag, Buffer data, int root) {
  auto records = Agree(g, tag, "broadcast", Shape(CallKind::kBroadcast, data, root, -1), data);
  if (data.count == 0) return;
  if (Inline(data)) {
    std::memcpy(data.data, records[root].payload, Bytes(data));
    return;
  }
  DispatchHost(data.dtype, [&](auto zero) {
    using T = decltype(zero);
    gloo::BroadcastOptions opts(g.context());
    opts.setOutput<T>(static_cast<T*>(data.data), data.count);
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(g.timeout());
    gloo::broadcast(opts);
  });
}

void GlooAllGather(Group& g, uint32_t tag, Buffer input, Buffer output) {
  auto records = Agree(g, tag, "all_gather", Shape(CallKind::kAllGather, input, -1, -1), input);
  if (input.count == 0) return;
  size_t bytes = Bytes(input);
  if (Inline(input)) {
    for (size_t r = 0; r < records.size(); ++r) {
      std::memcpy(static_cast<char*>(output.data) + r * bytes, records[r].payload, bytes);
    }
    return;
  }
  DispatchHost(input.dtype, [&](auto zero) {
    using T = decltype(zero);
    gloo::AllgatherOptions opts(g.context());
    opts.setInput<T>(static_cast<T*>(input.data), input.count);
    opts.setOutput<T>(static_cast<T*>(output.data), output.count);
    opts.setTag(tag);
    opts.setTimeout(g.timeout());
    gloo::allgather(opts);
  });
}

void GlooReduceScatter(Group& g, uint32_t tag, Buffer input, Buffer output, ReduceOp op) {
  auto records = Agree(g, tag, "reduce_scatter",
                       Shape(CallKind::kReduceScatter, input, -1, static_cast<int64_t>(op)), input);
  if (input.count == 0) return;
  size_t es = ElementSize(input.dtype);
  size_t offset = ReduceScatterOffset(input.count, g.rank(), g.size());
  size_t mine = output.count;
  if (Inline(input)) {
    std::vector<char> full(Bytes(input));
    DispatchHost(input.dtype, [&](auto zero) {
      ReduceRecords<decltype(zero)>(records, input.count, op, full.data(), g.size());
    });
    if (mine > 0) std::memcpy(output.data, full.data() + offset * es, mine * es);  // may be null
    return;
  }
  if (input.count > static_cast<size_t>(INT_MAX)) {
    // Gloo's reduce-scatter counts in int: an all-reduce of a copy, then this
    // rank's block.
    std::vector<char> scratch(static_cast<const char*>(input.data),
                              static_cast<const char*>(input.data) + Bytes(input));
    RunGlooAllReduce(g, tag, Buffer{scratch.data(), input.count, input.dtype}, op);
    if (mine > 0) std::memcpy(output.data, scratch.data() + offset * es, mine * es);
    return;
  }
  // Gloo's recursive halving-doubling reduce-scatter (with its binary blocks
  // for world sizes that are not powers of two), kept by the group for the
  // next call of the same shape: building it registers its buffers with the
  // pairs and allocates twice the input, which costs more than the exchange.
  CallShape shape = Shape(CallKind::kReduceScatter, input, -1, static_cast<int64_t>(op));
  auto plan = std::static_pointer_cast<ReduceScatterPlan>(g.Cached(shape));
  if (!plan) {
    plan = DispatchHost(input.dtype, [&](auto zero) -> std::shared_ptr<ReduceScatterPlan> {
      using T = decltype(zero);
      return std::make_shared<TypedReduceScatterPlan<T>>(g, input.count, op);
    });
    g.Cache(shape, plan);
  }
  plan->Run(input.data, output.data, mine);
  if (op == ReduceOp::kAverage) {
    DispatchHost(input.dtype, [&](auto zero) { DivideBy<decltype(zero)>(output.data, mine, g.size()); });
  }
}

void GlooReduce(Group& g, uint32_t tag, Buffer data, int root, ReduceOp op) {
  auto records = Agree(g, tag, "reduce",
                       Shape(CallKind::kReduce, data, root, static_cast<int64_t>(op)), data);
  if (data.count == 0) return;
  if (Inline(data)) {
    if (g.rank() != root) return;
    DispatchHost(data.dtype, [&](auto zero) {
      ReduceRecords<decltype(zero)>(records, data.count, op, data.data, g.size());
    });
    return;
  }
  DispatchHost(data.dtype, [&](auto zero) {
    using T = decltype(zero);
    gloo::ReduceOptions opts(g.context());
    opts.setOutput<T>(static_cast<T*>(data.data), data.count);
    opts.setRoot(root);
    opts.setReduceFunction(ReduceFunc<T>(op));
    opts.setTag(tag);
    opts.setTimeout(g.timeout());
    gloo::reduce(opts);
    if (op == ReduceOp::kAverage && g.rank() == root) DivideBy<T>(data.data, data.count, g.size());
  });
}

void GlooBarrier(Group& g, uint32_t tag) {
  gloo::BarrierOptions opts(g.context());
  opts.setTag(tag);
  opts.setTimeout(g.timeout());
  gloo::barrier(opts);
}

namespace {
// The slot of the seq-th message from `from` to `to`.
uint64_t P2pSlot(uint8_t prefix, uint64_t seq, int from, int to) {
  return gloo::Slot::build(prefix, static_cast<uint32_t>(seq * 2 + (from < to ? 0 : 1)));
}
}  // namespace

// A receiver whose buffer has another size fails with an error instead of
// Gloo aborting it: it learns the size from the header first.
void GlooSend(Group& g, Buffer data, int dst, uint64_t seq) {
  uint64_t bytes = Bytes(data);
  auto header = g.context()->createUnboundBuffer(&bytes, sizeof(bytes));
  header->send(dst, P2pSlot(kP2pHeaderSlotPrefix, seq, g.rank(), dst));
  if (bytes > 0) {
    auto buf = g.context()->createUnboundBuffer(data.data, bytes);
    buf->send(dst, P2pSlot(kP2pSlotPrefix, seq, g.rank(), dst));
    buf->waitSend(g.timeout());
  }
  header->waitSend(g.timeout());
}

void GlooRecv(Group& g, Buffer data, int src, uint64_t seq) {
  uint64_t expected = Bytes(data), bytes = 0;
  auto header = g.context()->createUnboundBuffer(&bytes, sizeof(bytes));
  header->recv(src, P2pSlot(kP2pHeaderSlotPrefix, seq, src, g.rank()));
  header->waitRecv(g.timeout());
  if (bytes == 0 && expected == 0) return;
  std::vector<char> drain;
  void* into = data.data;
  if (bytes != expected) {
    drain.resize(bytes);  // take the message anyway, so the pair stays in step
    into = drain.data();
  }
  if (bytes > 0) {
    auto buf = g.context()->createUnboundBuffer(into, bytes);
    buf->recv(src, P2pSlot(kP2pSlotPrefix, seq, src, g.rank()));
    buf->waitRecv(g.timeout());
  }
  if (bytes != expected) {
    throw CollectiveError(g.Describe("recv") + "rank " + std::to_string(src) + " sent " +
                          std::to_string(bytes) + " bytes into a buffer of " +
                          std::to_string(expected) + " bytes; the message was dropped");
  }
}

}  // namespace lumen::collective::internal
