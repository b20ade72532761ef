// Reliability item 9 for the store's requests (doc/reliability.md): a create,
// seal, abort or get whose answer was lost is sent again with the same
// RetryKey on the same connection, and the StoreServer answers the repeat from
// its table (StoreRepeats) without acting again: one allocation, one seal, one
// pin. Without a key (or with a new one) the same resend acts twice, which is
// what the table is there to prevent.
#include "lumen/objectstore/store_repeats.h"

#include <stdlib.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <capnp/message.h>
#include <catch2/catch.hpp>

#include "lumen/common/ids.h"
#include "lumen/common/proto_util.h"
#include "lumen/objectstore/store_server.h"
#include "store_request_builder.h"

namespace lumen::objectstore {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kKiB = 1024;
using Op = StoreOp;

// A store on its own io_context, spilling into a temporary directory, whose
// requests carry a key when asked.
class Store {
 public:
  explicit Store(uint64_t bytes) {
    std::string pattern = (fs::temp_directory_path() / "lumen-repeats-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    dir_ = pattern;
    auto created = StoreServer::Create(StoreOptions{.bytes = bytes,
                                                    .spill_dir = dir_,
                                                    .full_grace = std::chrono::milliseconds(5000),
                                                    .io = &io_,
                                                    .reserve = StoreOptions::Reserve::kPerObject});
    REQUIRE(created.ok());
    store_ = std::move(*created);
  }
  ~Store() {
    store_.reset();
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  StoreServer& server() { return *store_; }

  // Sends one request of `client`; with `key` (request number > 0) it carries
  // RetryKey{kProcess, key, attempt}. The slot is filled when the store answers.
  std::shared_ptr<std::optional<StoreReply>> Send(ClientId client, Op op, const ObjectId& id,
                                                  uint64_t size = 0, uint64_t key = 0,
                                                  uint32_t attempt = 0) {
    capnp::MallocMessageBuilder message;
    auto env = message.initRoot<proto::Envelope>();
    proto::StoreRequest::Builder req = InitStoreRequest(env, op);
    req.setObjectId(DataOf(id));
    req.setSize(size);
    if (key != 0) {
      auto k = req.initRetryKey();
      k.setClient(kProcess);
      k.setRequest(key);
      k.setAttempt(attempt);
    }
    auto slot = std::make_shared<std::optional<StoreReply>>();
    StoreCaller caller{.client = client, .job = job_, .local = true};
    REQUIRE(store_->Handle(caller, env.asReader(), [slot](const StoreReply& r) { *slot = r; }).ok());
    return slot;
  }
  StoreReply Call(ClientId client, Op op, const ObjectId& id, uint64_t size = 0, uint64_t key = 0,
                  uint32_t attempt = 0) {
    auto slot = Send(client, op, id, size, key, attempt);
    REQUIRE(RunUntil([&] { return slot->has_value(); }));
    return **slot;
  }
  template <typename Pred>
  bool RunUntil(Pred done) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      io_.run_one_for(std::chrono::milliseconds(5));
    }
    return done();
  }
  uint64_t Used() const { return store_->GetStats().used; }
  uint64_t Objects() const { return store_->GetStats().num_objects; }

  static constexpr uint64_t kProcess = 0x5eed;

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_ =
      boost::asio::make_work_guard(io_);
  std::string dir_;
  JobId job_ = JobId::Random();
  std::unique_ptr<StoreServer> store_;
};

constexpr ClientId kWorker = 7;
constexpr ClientId kOther = 8;

}  // namespace

TEST_CASE("a resent create, seal, get and abort with their key act once and get the first answer",
          "[store_repeats]") {
  Store s(1024 * kKiB);
  const ObjectId id = ObjectId::ForPut();
  // Create: the repeat gets the same region; one object, its bytes once.
  StoreReply created = s.Call(kWorker, Op::kCreate, id, 100 * kKiB, /*key=*/11);
  REQUIRE(created.ok());
  const uint64_t used = s.Used();
  StoreReply again = s.Call(kWorker, Op::kCreate, id, 100 * kKiB, 11, /*attempt=*/1);
  REQUIRE(again.ok());
  CHECK(again->offset == created->offset);
  CHECK(again->size == created->size);
  CHECK(s.Used() == used);
  CHECK(s.Objects() == 1);
  // Seal: the repeat is OK (a second seal would be FailedPrecondition).
  REQUIRE(s.Call(kWorker, Op::kSeal, id, 0, 12).ok());
  CHECK(s.Call(kWorker, Op::kSeal, id, 0, 12, 1).ok());
  CHECK(s.Call(kWorker, Op::kSeal, id, 0, 12, 3).ok());  // the third attempt too
  // Get: two repeats, one pin.
  StoreReply got = s.Call(kOther, Op::kGet, id, 0, 13);
  REQUIRE(got.ok());
  StoreReply got_again = s.Call(kOther, Op::kGet, id, 0, 13, 1);
  REQUIRE(got_again.ok());
  CHECK(got_again->offset == got->offset);
  CHECK(s.Call(kOther, Op::kGet, id, 0, 13, 2).ok());
  CHECK(s.server().GetStats().num_pinned == 1);
  CHECK(s.server().RepeatedRequests() == 5);
  // One release and the owner's delete free it: no pin was left behind.
  s.Send(kOther, Op::kRelease, id);
  s.Send(kWorker, Op::kDelete, id);
  CHECK(s.Used() == 0);
  CHECK(s.Objects() == 0);
  // Abort: the repeat gets OK, not NotFound, and frees nothing more.
  const ObjectId half = ObjectId::ForPut();
  REQUIRE(s.Call(kWorker, Op::kCreate, half, 10 * kKiB, 14).ok());
  REQUIRE(s.Call(kWorker, Op::kAbort, half, 0, 15).ok());
  CHECK(s.Call(kWorker, Op::kAbort, half, 0, 15, 1).ok());
  CHECK(s.Used() == 0);
  CHECK(s.Objects() == 0);
  CHECK(s.server().RepeatedRequests() == 6);
  CHECK(s.server().TEST_CheckInvariants().ok());
}

TEST_CASE("the same resends without a key act twice: what the table prevents", "[store_repeats]") {
  Store s(1024 * kKiB);
  const ObjectId id = ObjectId::ForPut();
  REQUIRE(s.Call(kWorker, Op::kCreate, id, 100 * kKiB).ok());
  CHECK(s.Call(kWorker, Op::kCreate, id, 100 * kKiB).status().code() ==
        absl::StatusCode::kAlreadyExists);
  REQUIRE(s.Call(kWorker, Op::kSeal, id).ok());
  CHECK(s.Call(kWorker, Op::kSeal, id).status().code() == absl::StatusCode::kFailedPrecondition);
  // A repeat under a new key is a new request: a second pin.
  REQUIRE(s.Call(kOther, Op::kGet, id, 0, 21).ok());
  REQUIRE(s.Call(kOther, Op::kGet, id, 0, 22, 1).ok());
  s.Send(kOther, Op::kRelease, id);
  s.Send(kWorker, Op::kDelete, id);
  CHECK(s.Objects() == 1);  // the second pin holds it
  CHECK(s.server().RepeatedRequests() == 0);
  s.server().DisconnectClient(kOther);
  CHECK(s.Objects() == 0);
}

TEST_CASE("a key is the connection's: another connection's repeat acts, and a closed one's answers "
          "go",
          "[store_repeats]") {
  Store s(1024 * kKiB);
  const ObjectId id = ObjectId::ForPut();
  REQUIRE(s.Call(kWorker, Op::kCreate, id, 10 * kKiB, 31).ok());
  REQUIRE(s.Call(kWorker, Op::kSeal, id, 0, 32).ok());
  REQUIRE(s.Call(kOther, Op::kGet, id, 0, 33).ok());
  // The same key on another connection is not a repeat of it.
  REQUIRE(s.Call(kWorker, Op::kGet, id, 0, 33, 1).ok());
  CHECK(s.server().GetStats().num_pinned == 1);  // one object, pinned by both
  CHECK(s.server().RepeatedRequests() == 0);
  s.server().DisconnectClient(kOther);
  // Gone with its connection: a repeat there now acts (a new pin).
  REQUIRE(s.Call(kOther, Op::kGet, id, 0, 33, 1).ok());
  CHECK(s.server().RepeatedRequests() == 0);
  s.server().DisconnectClient(kOther);
  s.server().DisconnectClient(kWorker);
  s.Send(kWorker, Op::kDelete, id);
  CHECK(s.Objects() == 0);
}

TEST_CASE("a parked create and a get that restores a spilled object keep their late answers for "
          "repeats",
          "[store_repeats]") {
  Store s(1024 * kKiB);
  std::vector<ObjectId> ids;
  for (int i = 0; i < 5; ++i) {
    ObjectId id = ObjectId::ForPut();
    REQUIRE(s.Call(kWorker, Op::kCreate, id, 200 * kKiB).ok());
    REQUIRE(s.Call(kWorker, Op::kSeal, id).ok());
    ids.push_back(id);
  }
  // Does not fit: parked until a spill makes room, answered later.
  const ObjectId big = ObjectId::ForPut();
  auto slot = s.Send(kWorker, Op::kCreate, big, 200 * kKiB, 41);
  CHECK_FALSE(slot->has_value());
  REQUIRE(s.RunUntil([&] { return slot->has_value(); }));
  REQUIRE((*slot)->ok());
  StoreReply again = s.Call(kWorker, Op::kCreate, big, 200 * kKiB, 41, 1);
  REQUIRE(again.ok());
  CHECK(again->offset == (**slot)->offset);
  REQUIRE(s.Call(kWorker, Op::kAbort, big).ok());
  // The first object was spilled; its get restores it, then answers.
  REQUIRE(s.server().GetSpillStats().on_disk_objects >= 1);
  ObjectId spilled;
  for (const ObjectId& id : ids) {
    if (!s.server().IsSealed(id)) spilled = id;
  }
  REQUIRE_FALSE(spilled.IsNil());
  auto got = s.Send(kOther, Op::kGet, spilled, 0, 42);
  CHECK_FALSE(got->has_value());  // being read back
  REQUIRE(s.RunUntil([&] { return got->has_value(); }));
  REQUIRE((*got)->ok());
  StoreReply got_again = s.Call(kOther, Op::kGet, spilled, 0, 42, 1);
  REQUIRE(got_again.ok());
  CHECK(got_again->offset == (**got)->offset);
  CHECK(s.server().RepeatedRequests() == 2);
  // One pin: one release lets the delete free it.
  const uint64_t before = s.Objects();
  s.Send(kOther, Op::kRelease, spilled);
  s.Send(kWorker, Op::kDelete, spilled);
  CHECK(s.Objects() == before - 1);
  CHECK(s.server().TEST_CheckInvariants().ok());
}

TEST_CASE("StoreRepeats keeps the last per_client answers of each connection, oldest forgotten "
          "first",
          "[store_repeats]") {
  StoreRepeats repeats(StoreRepeats::Limits{.per_client = 4});
  auto key = [](ClientId conn, uint64_t request) {
    return StoreKey{.keyed = true, .resend = true, .conn = conn, .client = 9, .request = request};
  };
  for (uint64_t r = 1; r <= 6; ++r) repeats.Record(key(1, r), StoreRegion{r * 100, r});
  repeats.Record(key(2, 1), absl::NotFoundError("gone"));
  CHECK(repeats.size() == 5);
  CHECK(repeats.Find(key(1, 1)) == nullptr);  // overwritten
  CHECK(repeats.Find(key(1, 2)) == nullptr);
  for (uint64_t r = 3; r <= 6; ++r) {
    const StoreRepeats::Answer* a = repeats.Find(key(1, r));
    REQUIRE(a != nullptr);
    REQUIRE(a->ok());
    CHECK((*a)->offset == r * 100);
  }
  const StoreRepeats::Answer* error = repeats.Find(key(2, 1));
  REQUIRE(error != nullptr);
  CHECK(error->status().code() == absl::StatusCode::kNotFound);
  CHECK(repeats.Find(StoreKey{.keyed = true, .conn = 1, .client = 10, .request = 6}) == nullptr);
  CHECK(repeats.Find(StoreKey{}) == nullptr);
  CHECK(repeats.replayed() == 5);
  repeats.Forget(1);
  CHECK(repeats.size() == 1);
  CHECK(repeats.Find(key(1, 6)) == nullptr);
}

}  // namespace lumen::objectstore
