// The TaskEventFlusher against a real connection (a socket pair, the io loop
// run by the test): what it sends to the node for each kind of flush.
#include "core/worker/task_event_flusher.h"

#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <optional>
#include <vector>

#include <capnp/serialize.h>

#include "lumen/common/ids.h"
#include "lumen/common/task_event_wire.h"
#include "lumen/common/task_events.h"
#include "test/common/connection_test_util.h"

namespace lumen::runtime {
namespace {

using lumen_connection_test::Fd;
using lumen_connection_test::RunUntil;
using lumen_connection_test::ToGeneric;

// A flusher writing to a connection whose peer the test reads by hand.
struct FlusherRig {
  FlusherRig() {
    boost::asio::local::stream_protocol::socket a(io), b(io);
    boost::asio::local::connect_pair(a, b);
    peer = Fd(b.release());
    node = Connection::Create(ToGeneric(io, std::move(a)));
    flusher.emplace(io, recorder, std::chrono::milliseconds(1000), node);
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

}  // namespace
}  // namespace lumen::runtime
