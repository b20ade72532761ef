// The shape-check records of lumen::collective (train/src/call_record.h) on
// their own: no processes, no sockets (ExchangeRecords only with no peers).
#include "call_record.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

namespace col = lumen::collective;
using col::internal::CallKind;
using col::internal::CallRecord;
using col::internal::CallShape;
using col::internal::DType;

namespace {

CallShape AllReduceOf(int64_t count, DType dtype = DType::kFloat32, int64_t op = 0) {
  return CallShape{CallKind::kAllReduce, count, dtype, -1, op};
}

}  // namespace

// Invariant: a record has the same size whatever the call, so the exchange of
// records can never receive more bytes than it posted.
TEST_CASE("call records: fixed size, header then inline payload") {
  STATIC_REQUIRE(sizeof(CallRecord) == 64 + col::kInlineBytes);
  std::vector<float> data = {1.5f, -2.f, 3.f};
  CallRecord r = col::internal::MakeRecord(AllReduceOf(3), data.data(), data.size() * sizeof(float));
  CHECK(r.Shape() == AllReduceOf(3));
  CHECK(r.payload_bytes == 12);
  float back[3];
  std::memcpy(back, r.payload, sizeof(back));
  CHECK(std::vector<float>(back, back + 3) == data);
  CallRecord check_only = col::internal::MakeRecord(AllReduceOf(100000), nullptr, 0);
  CHECK(check_only.payload_bytes == 0);
  CHECK(check_only.Shape().count == 100000);
}

// Invariant: ranks agree exactly when every field of their shapes is equal,
// and a disagreement names this rank's call and each differing rank's.
TEST_CASE("call records: a mismatch names every rank that differs") {
  auto rec = [](const CallShape& s) { return col::internal::MakeRecord(s, nullptr, 0); };
  std::vector<CallRecord> same = {rec(AllReduceOf(10)), rec(AllReduceOf(10)), rec(AllReduceOf(10))};
  CHECK(col::internal::ShapeMismatch(same, 1).empty());

  std::vector<CallRecord> counts = {rec(AllReduceOf(10)), rec(AllReduceOf(20)), rec(AllReduceOf(10))};
  std::string m0 = col::internal::ShapeMismatch(counts, 0);
  CHECK(m0 == "this rank: all_reduce of 10 float32 (sum); rank 1: all_reduce of 20 float32 (sum)");
  std::string m1 = col::internal::ShapeMismatch(counts, 1);
  CHECK(m1.find("this rank: all_reduce of 20 float32 (sum)") != std::string::npos);
  CHECK(m1.find("rank 0: all_reduce of 10") != std::string::npos);
  CHECK(m1.find("rank 2: all_reduce of 10") != std::string::npos);

  // Each field alone is a mismatch: type, reduction, operation, root.
  CHECK_FALSE(col::internal::ShapeMismatch({rec(AllReduceOf(4)), rec(AllReduceOf(4, DType::kInt32))}, 0).empty());
  CHECK_FALSE(col::internal::ShapeMismatch({rec(AllReduceOf(4)), rec(AllReduceOf(4, DType::kFloat32, 3))}, 0).empty());
  CallShape bcast0{CallKind::kBroadcast, 4, DType::kFloat32, 0, -1};
  CallShape bcast1{CallKind::kBroadcast, 4, DType::kFloat32, 1, -1};
  CHECK_FALSE(col::internal::ShapeMismatch({rec(AllReduceOf(4)), rec(bcast0)}, 0).empty());
  CHECK(col::internal::ShapeMismatch({rec(bcast0), rec(bcast1)}, 1) ==
        "this rank: broadcast of 4 float32 to/from root 1; rank 0: broadcast of 4 float32 to/from root 0");
}

// Invariant: with no peers the exchange is local and returns this rank's record.
TEST_CASE("call records: a one-member exchange needs no Gloo context") {
  CallRecord mine = col::internal::MakeRecord(AllReduceOf(1), "abcd", 4);
  auto all = col::internal::ExchangeRecords(nullptr, 1, std::chrono::seconds(1), mine);
  REQUIRE(all.size() == 1);
  CHECK(std::memcmp(all[0].payload, "abcd", 4) == 0);
}
