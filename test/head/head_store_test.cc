// The head's persisted state on its own (no processes, no sockets): the
// write-ahead log with snapshots (FileHeadStore) and the restore paths of the
// tables that read it back (NodeTable, PlacementGroupManager).
#include "core/head/head_store.h"

#include <capnp/message.h>
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/head/file_head_store.h"
#include "core/head/head_state_recorder.h"
#include "core/head/node_table.h"
#include "lumen/common/connection.h"
#include "lumen/common/ids.h"
#include "lumen/common/proto_util.h"
#include "lumen/scheduler/placement_group_manager.h"

using lumen::head::FileHeadStore;
using lumen::head::HeadRecord;
using lumen::head::HeadState;
using lumen::head::HeadStateRecorder;
using lumen::head::HeadTable;

namespace {

// A directory removed at scope exit.
struct TempDir {
  TempDir() {
    std::string pattern = std::filesystem::temp_directory_path().string() + "/lumen-wal-XXXXXX";
    char* made = ::mkdtemp(pattern.data());
    REQUIRE(made != nullptr);
    path = made;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string path;
};

HeadState LoadFresh(const std::string& dir) {
  FileHeadStore store({.dir = dir});
  auto state = store.Load();
  REQUIRE(state.ok());
  return *state;
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// One record of every table, puts and deletes mixed, values with NULs.
std::vector<HeadRecord> EveryTable() {
  return {
      {HeadTable::kNodes, "node-a", std::string("frame\0a", 7)},
      {HeadTable::kNodes, "node-b", "frame-b"},
      {HeadTable::kDeadNodes, "node-c", ""},
      {HeadTable::kEndedJobs, "job-1", std::string("\1\0\0\0\0\0\0\0", 8)},
      {HeadTable::kNamedActors, HeadStateRecorder::JoinKey("", "counter"),
       HeadStateRecorder::Pack({"actor-id", "127.0.0.1:1", ""})},
      {HeadTable::kPlacementGroups, "pg-1", "state-words"},
      {HeadTable::kKv, HeadStateRecorder::JoinKey("ns", "k1"), "v1"},
      {HeadTable::kKv, HeadStateRecorder::JoinKey("ns", "k2"), "v2"},
      {HeadTable::kNodes, "node-b", "", /*deleted=*/true},
      {HeadTable::kKv, HeadStateRecorder::JoinKey("ns", "k1"), "v1-again"},
  };
}

HeadState Expected(const std::vector<HeadRecord>& records) {
  HeadState state;
  for (const auto& r : records) lumen::head::ApplyRecord(r, &state);
  return state;
}

}  // namespace

TEST_CASE("every table's entries come back from the log after a restart") {
  // Invariant: what was appended (puts and deletes, every table) is what a
  // new store on the same directory loads, byte for byte.
  TempDir dir;
  auto records = EveryTable();
  {
    FileHeadStore store({.dir = dir.path});
    REQUIRE(store.Load().ok());
    for (const auto& r : records) REQUIRE(store.Append(r).ok());
    CHECK(store.snapshots() == 0);
  }
  HeadState loaded = LoadFresh(dir.path);
  CHECK(loaded == Expected(records));
  CHECK(loaded[HeadTable::kNodes].size() == 1);
  CHECK(loaded[HeadTable::kKv].at(HeadStateRecorder::JoinKey("ns", "k1")) == "v1-again");
  std::vector<std::string> parts;
  REQUIRE(HeadStateRecorder::Unpack(
      loaded[HeadTable::kNamedActors].at(HeadStateRecorder::JoinKey("", "counter")), &parts));
  CHECK(parts == std::vector<std::string>{"actor-id", "127.0.0.1:1", ""});
}

TEST_CASE("a record cut short at the end of the log is ignored, and the log goes on after it") {
  // Invariant: a head killed while writing a record loses that record only;
  // the records before it load, and records appended after the restart load
  // too (the torn tail was cut off, not left in the middle of the log).
  TempDir dir;
  auto records = EveryTable();
  {
    FileHeadStore store({.dir = dir.path});
    REQUIRE(store.Load().ok());
    for (const auto& r : records) REQUIRE(store.Append(r).ok());
  }
  const std::string wal = dir.path + "/wal";
  std::string last;
  FileHeadStore::EncodeRecord(records.back(), &last);
  const auto size = std::filesystem::file_size(wal);
  for (size_t cut : {size_t{1}, size_t{5}, last.size() - 1}) {
    INFO("cut " << cut);
    std::filesystem::resize_file(wal, size - cut);
    std::vector<HeadRecord> kept(records.begin(), records.end() - 1);
    HeadState loaded = LoadFresh(dir.path);
    CHECK(loaded == Expected(kept));
    CHECK(std::filesystem::file_size(wal) == size - last.size());
    // Put the lost record back for the next cut.
    FileHeadStore store({.dir = dir.path});
    REQUIRE(store.Load().ok());
    REQUIRE(store.Append(records.back()).ok());
    REQUIRE(std::filesystem::file_size(wal) == size);
  }
  // A record whose bytes were damaged (CRC) at the end is dropped the same way.
  {
    int fd = ::open(wal.c_str(), O_WRONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    char x = 'X';
    REQUIRE(::pwrite(fd, &x, 1, static_cast<off_t>(size - 1)) == 1);
    ::close(fd);
    std::vector<HeadRecord> kept(records.begin(), records.end() - 1);
    CHECK(LoadFresh(dir.path) == Expected(kept));
  }
  {
    FileHeadStore store({.dir = dir.path});
    REQUIRE(store.Load().ok());
    REQUIRE(store.Append({HeadTable::kKv, "after", "restart"}).ok());
  }
  HeadState loaded = LoadFresh(dir.path);
  CHECK(loaded[HeadTable::kKv].at("after") == "restart");
  CHECK(loaded[HeadTable::kKv].at(HeadStateRecorder::JoinKey("ns", "k1")) == "v1");
}

TEST_CASE("snapshots compact the log, and snapshot plus log load as the log alone would") {
  // Invariant: with snapshots every few records, the state that loads is the
  // same as replaying every record; the log stays below the threshold plus
  // one record; a crash between the snapshot and emptying the log (both
  // files hold the same records) loads the same state.
  TempDir dir;
  std::vector<HeadRecord> records;
  for (int i = 0; i < 500; ++i) {
    records.push_back(
        {HeadTable::kKv, "key" + std::to_string(i % 37), "value" + std::to_string(i), i % 11 == 0});
  }
  uint64_t snapshots = 0;
  {
    FileHeadStore store({.dir = dir.path, .snapshot_log_bytes = 1024});
    REQUIRE(store.Load().ok());
    for (const auto& r : records) {
      REQUIRE(store.Append(r).ok());
      REQUIRE(store.log_bytes() < 1024);
    }
    snapshots = store.snapshots();
  }
  CHECK(snapshots > 5);
  CHECK(std::filesystem::exists(dir.path + "/snapshot"));
  CHECK(!std::filesystem::exists(dir.path + "/snapshot.tmp"));
  HeadState loaded = LoadFresh(dir.path);
  CHECK(loaded == Expected(records));

  // The crash window: a log that repeats what the snapshot holds.
  std::string log;
  for (const auto& r : records) FileHeadStore::EncodeRecord(r, &log);
  std::ofstream(dir.path + "/wal", std::ios::binary | std::ios::trunc) << log;
  CHECK(LoadFresh(dir.path) == Expected(records));

  // A damaged snapshot is not silently dropped.
  std::string snap = FileBytes(dir.path + "/snapshot");
  REQUIRE(snap.size() > 4);
  std::filesystem::resize_file(dir.path + "/snapshot", snap.size() - 3);
  FileHeadStore store({.dir = dir.path});
  auto damaged = store.Load();
  REQUIRE(!damaged.ok());
  CHECK(damaged.status().code() == absl::StatusCode::kDataLoss);
}

TEST_CASE("a restored node is alive without a connection until its grace ends, or joins again") {
  // Invariant: a node the restarted head read from its state is listed alive
  // with its resources; registering again (same id, a new connection) is a
  // join; one that never comes back is declared dead once the grace and the
  // silence limit have passed, not before.
  using Clock = lumen::head::NodeTable::Clock;
  auto frame_of = [](const lumen::NodeId& id) {
    capnp::MallocMessageBuilder message;
    auto stats = message.initRoot<lumen::proto::NodeStats>();
    stats.setNodeId(lumen::DataOf(id));
    stats.setAddress("127.0.0.1:7000");
    auto total = stats.initTotal(1);
    total[0].setName("CPU");
    total[0].setQuantity(4);
    std::string frame;
    lumen::AppendFrame(message, &frame);
    return frame;
  };
  lumen::head::NodeTable nodes(
      {.health_check_period = std::chrono::milliseconds(100), .failure_threshold = 5});
  const auto now = Clock::now();
  const auto grace = std::chrono::seconds(2);
  lumen::NodeId back = lumen::NodeId::Random(), gone = lumen::NodeId::Random();
  REQUIRE(nodes.Restore(frame_of(back), now + grace));
  REQUIRE(nodes.Restore(frame_of(gone), now + grace));
  CHECK_FALSE(nodes.Restore("garbage", now + grace));
  REQUIRE(nodes.size() == 2);
  CHECK(nodes.Find(back)->alive);
  CHECK(nodes.Find(back)->total.at("CPU") == 4);
  CHECK(nodes.ExpireSilent(now + grace).empty());
  // `back` registers again on connection 7: the same node, back on a new
  // connection (as after a reset of its link, item 8).
  {
    std::string frame = frame_of(back);
    capnp::FlatArrayMessageReader reader(
        kj::arrayPtr(reinterpret_cast<const capnp::word*>(frame.data() + lumen::kFrameHeaderBytes),
                     (frame.size() - lumen::kFrameHeaderBytes) / sizeof(capnp::word)));
    CHECK(nodes.Report(7, reader.getRoot<lumen::proto::NodeStats>(), now + grace) ==
          lumen::head::NodeTable::ReportOutcome::kRejoined);
  }
  // `gone` is silent past its grace (its silence counted from grace minus the
  // limit), `back` reported at the grace's end.
  auto dead = nodes.ExpireSilent(now + grace + std::chrono::milliseconds(1));
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].id == gone);
  CHECK(nodes.Find(back)->alive);
  // A dead id stays dead across a restart.
  lumen::head::NodeTable again({});
  again.RestoreDead(gone);
  CHECK_FALSE(again.Restore(frame_of(gone), now));
  CHECK(again.WasDeclaredDead(gone));
}

TEST_CASE("a restored placement group keeps its nodes when created, and waits again otherwise") {
  // Invariant: a created group comes back created on the same nodes (no
  // second reservation); a group caught mid-commit comes back pending; a
  // known id is refused.
  using namespace lumen::scheduler;
  struct RecordingTransport : BundleTransport {
    absl::Status Send(const BundleRequest& r) override {
      sent.push_back(r);
      return absl::OkStatus();
    }
    std::vector<BundleRequest> sent;
  } transport;
  PlacementGroupManager manager({.transport = &transport});
  PlacementGroup created{.id = "g1",
                         .name = "one",
                         .strategy = PlacementStrategy::kSpread,
                         .bundles = {{{"CPU", 1}}, {{"CPU", 1}}},
                         .state = GroupState::kCreated,
                         .nodes = {"n1", "n2"}};
  PlacementGroup preparing{
      .id = "g2", .bundles = {{{"CPU", 1}}}, .state = GroupState::kCommitting, .nodes = {"n1"}};
  REQUIRE(manager.Restore(created).ok());
  REQUIRE(manager.Restore(preparing).ok());
  CHECK(manager.Restore(created).code() == absl::StatusCode::kAlreadyExists);
  CHECK(manager.Find("g1")->state == GroupState::kCreated);
  CHECK(manager.Find("g1")->nodes == std::vector<std::string>{"n1", "n2"});
  CHECK(manager.Find("g2")->state == GroupState::kPending);
  CHECK(manager.live_groups() == 2);
  // The created group's node dies: it goes back to pending, as before the restart.
  CHECK(transport.sent.empty());  // restoring reserved nothing anew
  manager.OnNodeDead("n2");
  CHECK(manager.Find("g1")->state == GroupState::kPending);
  // ... and its bundle on the surviving node is released.
  bool cancelled_on_n1 = false;
  for (const auto& r : transport.sent) {
    cancelled_on_n1 |= r.phase == BundlePhase::kCancel && r.node_id == "n1" && r.group_id == "g1";
  }
  CHECK(cancelled_on_n1);
}
