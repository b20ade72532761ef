// The shape check of lumen::collective on Gloo: before data moves, every rank
// contributes a fixed-size CallRecord (its call's operation, count, type and
// root/reduction, plus the data itself when it fits in kInlineBytes) to one
// Gloo allgather. Every rank then sees every record, so all ranks detect a
// mismatch together, and a call whose data travelled inline is finished
// locally from the records without a second round trip. The record has the
// same size on every rank whatever the call, so the exchange itself can never
// receive more bytes than it posted (Gloo aborts the process when that happens).
// Stateless functions; the caller serialises calls per group.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gloo/context.h>

#include "lumen/train/collective.h"

namespace lumen::collective::internal {

// Which collective a record describes.
enum class CallKind : int64_t { kAllReduce = 1, kBroadcast, kAllGather, kReduceScatter, kReduce };

struct CallShape {
  CallKind kind = CallKind::kAllReduce;
  int64_t count = 0;  // elements of the input
  DType dtype = DType::kFloat32;
  int64_t root = -1;  // broadcast and reduce; -1 otherwise
  int64_t op = -1;    // ReduceOp of reducing calls; -1 otherwise
  bool operator==(const CallShape&) const = default;
};

// One rank's contribution: a 64-byte header and the inline data.
struct CallRecord {
  int64_t kind;
  int64_t count;
  int64_t dtype;
  int64_t root;
  int64_t op;
  int64_t payload_bytes;  // bytes of `payload` in use; 0 when the data is not inline
  int64_t reserved[2];
  alignas(8) unsigned char payload[kInlineBytes];

  CallShape Shape() const;
};
static_assert(sizeof(CallRecord) == 64 + kInlineBytes);

// "all_reduce of 10 float32 (sum)".
std::string ShapeText(const CallShape& shape);

// This rank's record for `shape`; copies `payload_bytes` of `payload` inline
// (payload_bytes <= kInlineBytes; 0 for a check only).
CallRecord MakeRecord(const CallShape& shape, const void* payload, size_t payload_bytes);

// Every rank's record in rank order: one Gloo allgather under `tag` (world
// size 1: this rank's alone). Throws what Gloo throws (a failed or silent peer).
std::vector<CallRecord> ExchangeRecords(const std::shared_ptr<gloo::Context>& context,
                                        uint32_t tag, std::chrono::milliseconds timeout,
                                        const CallRecord& mine);

// Empty when every record has the shape of records[rank]; otherwise says who
// differs: "this rank: ...; rank 1: ...".
std::string ShapeMismatch(const std::vector<CallRecord>& records, int rank);

}  // namespace lumen::collective::internal
