#include "call_record.h"

#include <cstring>

#include <gloo/allgather.h>

#include "element_types.h"

namespace lumen::collective::internal {
namespace {

const char* KindName(CallKind kind) {
  switch (kind) {
    case CallKind::kAllReduce: return "all_reduce";
    case CallKind::kBroadcast: return "broadcast";
    case CallKind::kAllGather: return "all_gather";
    case CallKind::kReduceScatter: return "reduce_scatter";
    case CallKind::kReduce: return "reduce";
  }
  return "operation ?";
}

const char* OpName(int64_t op) {
  static const char* kNames[] = {"sum", "product", "min", "max", "average"};
  return op >= 0 && op < 5 ? kNames[op] : "?";
}

}  // namespace

CallShape CallRecord::Shape() const {
  CallShape s;
  s.kind = static_cast<CallKind>(kind);
  s.count = count;
  s.dtype = static_cast<DType>(dtype);
  s.root = root;
  s.op = op;
  return s;
}

std::string ShapeText(const CallShape& shape) {
  std::string text = std::string(KindName(shape.kind)) + " of " + std::to_string(shape.count) +
                     " " + DTypeName(shape.dtype);
  if (shape.op >= 0) text += std::string(" (") + OpName(shape.op) + ")";
  if (shape.root >= 0) text += " to/from root " + std::to_string(shape.root);
  return text;
}

CallRecord MakeRecord(const CallShape& shape, const void* payload, size_t payload_bytes) {
  CallRecord r{};
  r.kind = static_cast<int64_t>(shape.kind);
  r.count = shape.count;
  r.dtype = static_cast<int64_t>(shape.dtype);
  r.root = shape.root;
  r.op = shape.op;
  r.payload_bytes = static_cast<int64_t>(payload_bytes);
  if (payload_bytes > 0) std::memcpy(r.payload, payload, payload_bytes);
  return r;
}

std::vector<CallRecord> ExchangeRecords(const std::shared_ptr<gloo::Context>& context,
                                        uint32_t tag, std::chrono::milliseconds timeout,
                                        const CallRecord& mine) {
  if (!context || context->size == 1) return {mine};
  std::vector<CallRecord> all(context->size);
  // Gloo's allgather is a ring: size - 1 steps of one record each.
  gloo::AllgatherOptions opts(context);
  opts.setInput<uint8_t>(reinterpret_cast<uint8_t*>(const_cast<CallRecord*>(&mine)),
                         sizeof(CallRecord));
  opts.setOutput<uint8_t>(reinterpret_cast<uint8_t*>(all.data()), all.size() * sizeof(CallRecord));
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allgather(opts);
  return all;
}

std::string ShapeMismatch(const std::vector<CallRecord>& records, int rank) {
  CallShape mine = records[rank].Shape();
  std::string others;
  for (size_t r = 0; r < records.size(); ++r) {
    CallShape theirs = records[r].Shape();
    if (theirs == mine) continue;
    others += "; rank " + std::to_string(r) + ": " + ShapeText(theirs);
  }
  if (others.empty()) return "";
  return "this rank: " + ShapeText(mine) + others;
}

}  // namespace lumen::collective::internal
