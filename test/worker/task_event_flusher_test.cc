// The TaskEventFlusher against a real connection (a socket pair, the io loop
// run by the test): what it sends to the node for each kind of flush.
#include "core/worker/task_event_flusher.h"

#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <optional>
#include <thread>
#include <vector>

#include <capnp/serialize.h>

#include "lumen/common/ids.h"
#include "lumen/common/task_event_wire.h"
#include "lumen/common/task_events.h"
#include "test/common/connection_test_util.h"

namespace lumen::runtime {
namespace {

using lumen_connection_test::Drain;
using lumen_connection_test::Fd;
using lumen_connection_test::RunUntil;
using lumen_connection_test::ToGeneric;

// A flusher writing to a connection whose peer the test reads by hand.
struct FlusherRig {
  explicit FlusherRig(std::chrono::milliseconds period = std::chrono::milliseconds(1000)) {
    boost::asio::local::stream_protocol::socket a(io), b(io);
    boost::asio::local::connect_pair(a, b);
    peer = Fd(b.release());
    node = Connection::Create(ToGeneric(io, std::move(a)));
    flusher.emplace(io, recorder, period, node);
  }

  // The next frame the node got, once the connection wrote it.
  proto::Envelope::Reader NextFrame() {
    REQUIRE(AnythingSent());  // (so that the read below cannot block)
    REQUIRE(ReadFrameBlocking(peer.get(), 1 << 24, &words).ok());
    reader.emplace(kj::ArrayPtr<const capnp::word>(words.data(), words.size()));
    return reader->getRoot<proto::Envelope>();
  }
  // Whether a frame (or any byte) waits unread.
  bool AnythingSent() {
    REQUIRE(RunUntil(io, [&] { return node->idle(); }));
    char byte;
    return ::recv(peer.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }

  boost::asio::io_context io;
  Fd peer;
  std::shared_ptr<Connection> node;
  TaskEventRecorder recorder;
  std::optional<TaskEventFlusher> flusher;  // made once `node` is
  std::vector<capnp::word> words;
  std::optional<capnp::FlatArrayMessageReader> reader;
};

TEST_CASE("the flusher sends what was recorded once, and answers a request even with nothing",
          "[worker][task_events]") {
  // Invariants: a flush sends the events recorded since the last one, in
  // order, in one taskEvents frame, and nothing when there are none; an
  // answer to the node's request carries its id, with no events if none
  // were recorded; the last flush before close sends what is left.
  FlusherRig rig;
  const TaskId first = TaskId::Random(), second = TaskId::Random();
  rig.recorder.Record(TaskEventKind::kSubmitted, first, 0, "first");
  rig.recorder.Record(TaskEventKind::kSubmitted, second, 1, "second");
  rig.flusher->FlushNow();
  proto::Envelope::Reader frame = rig.NextFrame();
  REQUIRE(frame.isTaskEvents());
  CHECK(frame.getRequestId() == 0);
  auto events = TaskEventsFromProto(frame.getTaskEvents());
  REQUIRE(events.ok());
  REQUIRE(events->size() == 2);
  CHECK((*events)[0].task_id == first);
  CHECK((*events)[0].name == "first");
  CHECK((*events)[1].task_id == second);
  CHECK((*events)[1].attempt == 1);

  rig.flusher->FlushNow();  // nothing new
  CHECK_FALSE(rig.AnythingSent());

  rig.flusher->AnswerFlush(42);
  frame = rig.NextFrame();
  REQUIRE(frame.isTaskEvents());
  CHECK(frame.getRequestId() == 42);
  events = TaskEventsFromProto(frame.getTaskEvents());
  REQUIRE(events.ok());
  CHECK(events->empty());

  rig.recorder.Record(TaskEventKind::kFailed, first, 0, "gone");
  rig.flusher->FlushBeforeClose();
  frame = rig.NextFrame();
  REQUIRE(frame.isTaskEvents());
  events = TaskEventsFromProto(frame.getTaskEvents());
  REQUIRE(events.ok());
  REQUIRE(events->size() == 1);
  CHECK((*events)[0].kind == TaskEventKind::kFailed);
  CHECK((*events)[0].name == "gone");
}

TEST_CASE("a recording thread that holds kTargetRecords events flushes them without waiting "
          "for the period", "[worker][task_events]") {
  // Invariant: a busy process's events leave for the node about every
  // kTargetRecords records from its first ones on, whatever its period; a
  // second-long first period let its rings grow to tens of MiB and drop events.
  FlusherRig rig(std::chrono::hours(1));  // the periodic flush never comes here
  rig.flusher->Start();
  Drain(rig.io);
  constexpr size_t kTarget = TaskEventFlusher::kTargetRecords;
  // This thread's ring (the io loop runs only inside Drain, on this thread too).
  auto record = [&rig](size_t count) {
    for (size_t i = 0; i < count; ++i) {
      rig.recorder.Record(TaskEventKind::kSubmitted, TaskId::Random(), 0, "f");
    }
  };
  auto events_of_next_frame = [&rig] {
    Drain(rig.io);  // the early flush the signal posted
    proto::Envelope::Reader frame = rig.NextFrame();
    REQUIRE(frame.isTaskEvents());
    auto events = TaskEventsFromProto(frame.getTaskEvents());
    REQUIRE(events.ok());
    return events->size();
  };

  record(kTarget - 1);
  Drain(rig.io);
  CHECK_FALSE(rig.AnythingSent());
  record(1);
  CHECK(events_of_next_frame() == kTarget);

  // Once per drain: the next kTarget of that thread flush again, on their own.
  record(kTarget - 1);
  Drain(rig.io);
  CHECK_FALSE(rig.AnythingSent());
  record(1);
  CHECK(events_of_next_frame() == kTarget);

  // Stopped, the flusher leaves the recorder without a signal.
  rig.flusher->FlushBeforeClose();
  record(kTarget);
  Drain(rig.io);
  CHECK_FALSE(rig.AnythingSent());
}

TEST_CASE("the last flush before close goes whole when it is larger than the socket's buffer",
          "[worker][task_events]") {
  // Invariant: the node never reads a torn frame from a closing process: a
  // busy process's last records (here ~1.5 MiB packed, several times a unix
  // socket's buffer) go whole while the node reads, then the connection
  // closes. One non-blocking send used to write the first ~200 KiB and leave
  // the rest to a close that dropped it: the node logged DATA_LOSS and lost
  // the records.
  FlusherRig rig;
  constexpr int kEvents = 30000;
  std::vector<TaskId> ids;
  for (int i = 0; i < kEvents; ++i) {
    ids.push_back(TaskId::Random());
    rig.recorder.Record(TaskEventKind::kSubmitted, ids.back(), 0,
                        "a_function_name_of_thirty_two_b");
  }
  absl::Status read;
  std::vector<capnp::word> words;
  std::thread node_reads([&] { read = ReadFrameBlocking(rig.peer.get(), 1 << 24, &words); });
  rig.flusher->FlushBeforeClose();
  rig.node->Close(absl::CancelledError("closing"));
  node_reads.join();
  REQUIRE(read.ok());
  capnp::FlatArrayMessageReader reader(kj::ArrayPtr<const capnp::word>(words.data(), words.size()));
  auto frame = reader.getRoot<proto::Envelope>();
  REQUIRE(frame.isTaskEvents());
  auto events = TaskEventsFromProto(frame.getTaskEvents());
  REQUIRE(events.ok());
  REQUIRE(events->size() == kEvents);
  CHECK(events->front().task_id == ids.front());
  CHECK(events->back().task_id == ids.back());
}

}  // namespace
}  // namespace lumen::runtime
