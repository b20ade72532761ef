// The operations of lumen::collective on a Gloo group, each run by the group
// (Group::RunSync / RunAsync) under its tag. A call whose data fits in
// kInlineBytes per rank travels inside its shape-check record and is finished
// here from every rank's record (one Gloo allgather, no second round trip);
// a larger call is checked first (GroupOptions::verify_sizes) and then runs
// the Gloo algorithm for its size (doc/collective.md, "Algorithms").
// Arguments are validated by the caller. Run on whichever thread the group
// runs the operation on; never concurrently for one group.
#pragma once

#include <cstdint>

#include "group.h"
#include "lumen/train/collective.h"

namespace lumen::collective::internal {

void GlooAllReduce(Group& g, uint32_t tag, Buffer data, ReduceOp op);
void GlooBroadcast(Group& g, uint32_t tag, Buffer data, int root);
void GlooAllGather(Group& g, uint32_t tag, Buffer input, Buffer output);
void GlooReduceScatter(Group& g, uint32_t tag, Buffer input, Buffer output, ReduceOp op);
void GlooReduce(Group& g, uint32_t tag, Buffer data, int root, ReduceOp op);
void GlooBarrier(Group& g, uint32_t tag);
// Point to point: an 8-byte header with the payload's size, then the payload;
// `seq` is the pair's message number (Group::NextSendSeq / NextRecvSeq).
void GlooSend(Group& g, Buffer data, int dst, uint64_t seq);
void GlooRecv(Group& g, Buffer data, int src, uint64_t seq);

}  // namespace lumen::collective::internal
