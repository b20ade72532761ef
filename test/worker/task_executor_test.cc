// Deterministic tests of the TaskExecutor: a fake host (an in-memory store,
// scripted store answers, replies captured and decoded), tasks made by the
// test and run on the test thread. No processes, no sockets.
#include "core/worker/task_executor.h"

#include <capnp/serialize.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "lumen/common/codec.h"
#include "lumen/common/connection.h"
#include "lumen/common/proto_util.h"

namespace lumen::runtime {
namespace {

// A reply the executor sent, decoded.
struct Reply {
  TaskId task_id;
  uint32_t attempt = 0;
  enum class Kind { kInline, kStored, kError } kind = Kind::kInline;
  std::string inline_bytes;
  ObjectId stored_id;
  uint64_t stored_size = 0;
  NodeId stored_node;
  std::string stored_node_address;
  proto::FailureKind failure = proto::FailureKind::OTHER;
  std::string exception_type;
  std::string message;
  bool actor_exiting = false;
  bool last = false;  // sent through SendLastReplyAndExit
  // The executor's task events (TaskExecution), and where it ran.
  uint64_t exec_micros = 0;
  TaskExecution execution;
  int32_t worker_pid = 0;
  NodeId node;
};

Reply Decode(const std::string& frame, bool last) {
  REQUIRE(frame.size() > kFrameHeaderBytes);
  auto len = ParseFrameHeader(reinterpret_cast<const uint8_t*>(frame.data()), 1 << 20);
  REQUIRE(len.ok());
  REQUIRE(kFrameHeaderBytes + *len == frame.size());
  std::vector<capnp::word> words(*len / sizeof(capnp::word));
  std::memcpy(words.data(), frame.data() + kFrameHeaderBytes, *len);
  capnp::FlatArrayMessageReader reader(kj::arrayPtr(words.data(), words.size()));
  auto env = reader.getRoot<proto::Envelope>();
  REQUIRE(env.isTaskReply());
  auto r = env.getTaskReply();
  Reply out;
  out.task_id = IdFrom<TaskId>(r.getTaskId());
  out.attempt = r.getAttempt();
  out.actor_exiting = r.getActorExiting();
  out.last = last;
  out.exec_micros = r.getExecMicros();
  out.execution = {r.getStartedMicros(), r.getArgsFetchMicros(), r.getRunMicros(),
                   r.getStoreMicros()};
  out.worker_pid = r.getWorkerPid();
  out.node = IdFrom<NodeId>(r.getNodeId());
  auto value = r.getResult();
  switch (value.which()) {
    case proto::Value::INLINE: {
      auto d = value.getInline();
      out.inline_bytes.assign(reinterpret_cast<const char*>(d.begin()), d.size());
      break;
    }
    case proto::Value::STORED: {
      auto s = value.getStored();
      out.kind = Reply::Kind::kStored;
      out.stored_id = IdFrom<ObjectId>(s.getObjectId());
      out.stored_size = s.getSize();
      out.stored_node = IdFrom<NodeId>(s.getNodeId());
      out.stored_node_address = s.getNodeAddress().cStr();
      break;
    }
    case proto::Value::ERROR: {
      auto e = value.getError();
      out.kind = Reply::Kind::kError;
      out.failure = e.getKind();
      out.exception_type = e.getExceptionType().cStr();
      out.message = e.getMessage().cStr();
      break;
    }
  }
  return out;
}

// The node's store as a map, with answers the test can script; replies kept.
// Replies may come from its timer thread too (RunAfter, when run_timers).
class FakeHost final : public TaskExecutorHost {
 public:
  ~FakeHost() override { StopTimers(); }
  bool ShouldStop() override { return stop; }
  absl::StatusOr<internal::ObjectBytes> FetchArgument(const TaskToRun::Arg& arg) override {
    ++fetches;
    auto it = sealed.find(arg.stored);
    if (it == sealed.end()) return absl::NotFoundError("no copy anywhere");
    return internal::ObjectBytes{it->second, nullptr};
  }
  absl::StatusOr<uint8_t*> CreateInStore(const ObjectId& id, uint64_t size) override {
    log.push_back("create");
    if (!create_answer.ok()) return create_answer;
    auto& buffer = unsealed[id];
    buffer.assign(size, '\0');
    return reinterpret_cast<uint8_t*>(buffer.data());
  }
  absl::Status SealInStore(const ObjectId& id, uint64_t size) override {
    log.push_back("seal");
    auto it = unsealed.find(id);
    if (it == unsealed.end() || it->second.size() != size) return absl::NotFoundError("not created");
    sealed[id] = std::move(it->second);
    unsealed.erase(it);
    return absl::OkStatus();
  }
  absl::Status CheckSealed(const ObjectId& id) override {
    log.push_back("check");
    return sealed.count(id) ? absl::OkStatus() : absl::NotFoundError("not sealed");
  }
  void SendReply(const std::weak_ptr<Connection>&, std::string_view frames) override {
    // One write may carry several replies (held_replies.h): split the frames.
    std::lock_guard<std::mutex> lock(mu);
    replied.notify_all();
    ++sends;
    size_t at = 0;
    while (at < frames.size()) {
      REQUIRE(frames.size() - at > kFrameHeaderBytes);
      auto len = ParseFrameHeader(reinterpret_cast<const uint8_t*>(frames.data() + at), 1 << 20);
      REQUIRE(len.ok());
      replies.push_back(Decode(std::string(frames.substr(at, kFrameHeaderBytes + *len)), false));
      at += kFrameHeaderBytes + *len;
    }
    if (stop_after_replies && replies.size() >= stop_after_replies) stop = true;
  }
  void SendLastReplyAndExit(const std::weak_ptr<Connection>&, std::string frame) override {
    std::lock_guard<std::mutex> lock(mu);
    replies.push_back(Decode(frame, true));
  }
  // Runs `fn` on the timer thread when run_timers; otherwise only counts it.
  void RunAfter(std::chrono::microseconds delay, std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu);
    ++timers_armed;
    if (!run_timers) return;
    timers.emplace(std::chrono::steady_clock::now() + delay, std::move(fn));
    if (!timer_thread.joinable()) timer_thread = std::thread([this] { RunTimers(); });
    timer_changed.notify_all();
  }
  // Ends the timer thread (due timers not run). Before the executor goes.
  void StopTimers() {
    {
      std::lock_guard<std::mutex> lock(mu);
      timers_stopping = true;
      timer_changed.notify_all();
    }
    if (timer_thread.joinable()) timer_thread.join();
  }
  // Whether a reply for `id` came within `limit` (any thread may send it).
  bool WaitForReply(const TaskId& id, std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lock(mu);
    return replied.wait_for(lock, limit, [&] {
      for (const auto& r : replies) {
        if (r.task_id == id) return true;
      }
      return false;
    });
  }

  std::atomic<bool> stop = false;
  size_t stop_after_replies = 0;  // 0: never
  absl::Status create_answer = absl::OkStatus();
  std::map<ObjectId, std::string> sealed;
  std::map<ObjectId, std::string> unsealed;
  std::vector<std::string> log;  // store calls, in order
  int fetches = 0;
  int sends = 0;  // SendReply calls (writes)
  std::vector<Reply> replies;
  bool run_timers = false;
  int timers_armed = 0;  // RunAfter calls

 private:
  void RunTimers() {
    std::unique_lock<std::mutex> lock(mu);
    while (!timers_stopping) {
      if (timers.empty()) {
        timer_changed.wait(lock);
        continue;
      }
      auto first = timers.begin();
      if (timer_changed.wait_until(lock, first->first) != std::cv_status::timeout) continue;
      auto fn = std::move(first->second);
      timers.erase(first);
      lock.unlock();
      fn();  // may send replies (mu) and arm again
      lock.lock();
    }
  }

  std::mutex mu;  // replies, sends and the timers, once a timer thread runs
  std::condition_variable replied;
  std::condition_variable timer_changed;
  std::multimap<std::chrono::steady_clock::time_point, std::function<void()>> timers;
  bool timers_stopping = false;
  std::thread timer_thread;
};

// Test functions, registered under names no other test uses.
TaskExecutor* running_executor = nullptr;  // for the exiting actor method
// For executor_test.AwaitReply: which host, and the task whose reply it waits for.
FakeHost* awaiting_host = nullptr;
TaskId awaited_task;
// For executor_test.Gate: set once it runs; it returns once the gate opens.
std::atomic<bool> gate_entered = false;
std::mutex gate_mu;
std::condition_variable gate_changed;
bool gate_open = false;
const bool registered = [] {
  using internal::RemoteFunction;
  auto int_arg = [](const std::vector<internal::ObjectBytes>& args, size_t i) {
    auto v = codec::DecodeValue<int>(args.at(i).bytes);
    if (!v.ok()) throw std::runtime_error("bad argument");
    return *v;
  };
  RemoteFunction sum{.kind = RemoteFunction::Kind::kFunction};
  sum.invoke = [int_arg](const std::vector<internal::ObjectBytes>& args) {
    int total = 0;
    for (size_t i = 0; i < args.size(); ++i) total += int_arg(args, i);
    return codec::EncodeValue<int>(total);
  };
  internal::RegisterFunction("executor_test.Sum", "executor_test.Sum", sum);
  // The same, under a name only the held-replies test runs (never seen before it).
  internal::RegisterFunction("executor_test.Unseen", "executor_test.Unseen", sum);
  RemoteFunction big{.kind = RemoteFunction::Kind::kFunction};
  big.invoke = [int_arg](const std::vector<internal::ObjectBytes>& args) {
    return codec::EncodeValue<std::string>(std::string(int_arg(args, 0), 'x'));
  };
  internal::RegisterFunction("executor_test.Big", "executor_test.Big", big);
  // Waits outside the runtime (not a Get: the executor cannot see it) for
  // another task's reply to reach the host, 10 s at most: 1 if it came.
  RemoteFunction await_reply{.kind = RemoteFunction::Kind::kFunction};
  await_reply.invoke = [](const std::vector<internal::ObjectBytes>&) {
    return codec::EncodeValue<int>(
        awaiting_host->WaitForReply(awaited_task, std::chrono::seconds(10)) ? 1 : 0);
  };
  internal::RegisterFunction("executor_test.AwaitReply", "executor_test.AwaitReply", await_reply);
  // Waits for the test to open the gate, 10 s at most: 1 if it opened.
  RemoteFunction gate{.kind = RemoteFunction::Kind::kFunction};
  gate.invoke = [](const std::vector<internal::ObjectBytes>&) {
    gate_entered = true;
    std::unique_lock<std::mutex> lock(gate_mu);
    return codec::EncodeValue<int>(
        gate_changed.wait_for(lock, std::chrono::seconds(10), [] { return gate_open; }) ? 1 : 0);
  };
  internal::RegisterFunction("executor_test.Gate", "executor_test.Gate", gate);
  RemoteFunction fails{.kind = RemoteFunction::Kind::kFunction};
  fails.invoke = [](const std::vector<internal::ObjectBytes>&) -> std::string {
    throw std::invalid_argument("no good");
  };
  internal::RegisterFunction("executor_test.Fails", "executor_test.Fails", fails);
  RemoteFunction gpus{.kind = RemoteFunction::Kind::kFunction};
  gpus.invoke = [](const std::vector<internal::ObjectBytes>&) {
    return codec::EncodeValue<std::vector<int>>(TaskExecutor::CurrentGpuIds());
  };
  internal::RegisterFunction("executor_test.Gpus", "executor_test.Gpus", gpus);
  RemoteFunction method_gpus{.kind = RemoteFunction::Kind::kMethod};
  method_gpus.call = [](void*, const std::vector<internal::ObjectBytes>&) {
    return codec::EncodeValue<std::vector<int>>(TaskExecutor::CurrentGpuIds());
  };
  internal::RegisterFunction("executor_test.Counter.Gpus", "executor_test.Counter.Gpus",
                             method_gpus);
  RemoteFunction counter{.kind = RemoteFunction::Kind::kActorFactory};
  counter.create = [int_arg](const std::vector<internal::ObjectBytes>& args) {
    return std::make_shared<int>(int_arg(args, 0));
  };
  internal::RegisterFunction("executor_test.Counter", "executor_test.Counter", counter);
  RemoteFunction add{.kind = RemoteFunction::Kind::kMethod};
  add.call = [int_arg](void* instance, const std::vector<internal::ObjectBytes>& args) {
    int& value = *static_cast<int*>(instance);
    value += int_arg(args, 0);
    return codec::EncodeValue<int>(value);
  };
  internal::RegisterFunction("executor_test.Counter.Add", "executor_test.Counter.Add", add);
  RemoteFunction quit{.kind = RemoteFunction::Kind::kMethod};
  quit.call = [](void*, const std::vector<internal::ObjectBytes>&) {
    if (auto s = running_executor->ExitAfterCurrentCall(); !s.ok()) {
      throw std::runtime_error(std::string(s.message()));
    }
    return codec::EncodeValue<int>(-1);
  };
  internal::RegisterFunction("executor_test.Counter.Quit", "executor_test.Counter.Quit", quit);
  return true;
}();

TaskExecutor::Options TestOptions(uint64_t inline_limit = 1024) {
  return TaskExecutor::Options{.node_id = NodeId::Random(),
                               .node_address = "127.0.0.1:1234|/tmp/node.sock",
                               .worker_id = WorkerId::Random(),
                               .exe_path = "/bin/worker",
                               .inline_limit = inline_limit};
}

// Replies held (up to 8, each at most `max_hold`) and every function short,
// whatever this machine's load makes a run take: the tests check which
// replies are held, not the timing.
TaskExecutor::Options HoldingOptions(
    std::chrono::microseconds max_hold = std::chrono::microseconds(HeldReplies::MaxHoldMicros())) {
  auto options = TestOptions();
  options.short_task_micros = 1e12;
  options.hold_replies = 8;
  options.max_hold = max_hold;
  return options;
}

TaskToRun Task(std::string function, std::vector<int> inline_args,
               proto::TaskKind kind = proto::TaskKind::NORMAL) {
  TaskToRun task;
  task.task_id = TaskId::Random();
  task.attempt = 2;
  task.function = std::move(function);
  task.kind = kind;
  for (int v : inline_args) {
    TaskToRun::Arg arg;
    arg.value = codec::EncodeValue<int>(v);
    task.args.push_back(std::move(arg));
  }
  return task;
}

TEST_CASE("a small result is replied inline, with the task's id and attempt",
          "[worker][executor]") {
  // Invariant: a result within the inline limit goes back in the reply itself
  // and never touches the store.
  REQUIRE(registered);
  FakeHost host;
  TaskReceiver receiver;
  TaskExecutor executor(host, receiver, TestOptions());
  auto task = Task("executor_test.Sum", {2, 3, 4});
  executor.Execute(task);
  REQUIRE(host.replies.size() == 1);
  const Reply& r = host.replies[0];
  CHECK(r.task_id == task.task_id);
  CHECK(r.attempt == 2);
  REQUIRE(r.kind == Reply::Kind::kInline);
  CHECK(r.inline_bytes == codec::EncodeValue<int>(9));
  CHECK_FALSE(r.actor_exiting);
  CHECK_FALSE(r.last);
  CHECK(host.log.empty());
  CHECK_FALSE(TaskExecutor::InTask());  // only while the function runs
}

TEST_CASE("a result over the inline limit is written to the store, sealed, and replied as stored",
          "[worker][executor]") {
  // Invariant: the store holds exactly the result's bytes under the task's
  // return id before the reply names it; create comes before seal.
  FakeHost host;
  TaskReceiver receiver;
  auto options = TestOptions(/*inline_limit=*/64);
  TaskExecutor executor(host, receiver, options);
  auto task = Task("executor_test.Big", {1000});
  executor.Execute(task);
  REQUIRE(host.replies.size() == 1);
  const Reply& r = host.replies[0];
  REQUIRE(r.kind == Reply::Kind::kStored);
  ObjectId id = ObjectId::ForTaskReturn(task.task_id, 1);
  CHECK(r.stored_id == id);
  std::string expected = codec::EncodeValue<std::string>(std::string(1000, 'x'));
  CHECK(r.stored_size == expected.size());
  CHECK(r.stored_node == options.node_id);
  CHECK(r.stored_node_address == options.node_address);
  CHECK(host.log == std::vector<std::string>{"create", "seal"});
  REQUIRE(host.sealed.count(id) == 1);
  CHECK(host.sealed[id] == expected);
  CHECK(host.unsealed.empty());
}

TEST_CASE("a result an earlier attempt sealed is reused, one it left unsealed fails the task",
          "[worker][executor]") {
  // Invariant: a retried task whose return object exists replies "stored"
  // only when that copy is sealed (the value is the same), and never writes
  // over it.
  FakeHost host;
  TaskReceiver receiver;
  TaskExecutor executor(host, receiver, TestOptions(/*inline_limit=*/64));
  host.create_answer = absl::AlreadyExistsError("exists");

  auto sealed_task = Task("executor_test.Big", {500});
  ObjectId sealed_id = ObjectId::ForTaskReturn(sealed_task.task_id, 1);
  host.sealed[sealed_id] = "from the earlier attempt";
  executor.Execute(sealed_task);
  REQUIRE(host.replies.size() == 1);
  CHECK(host.replies[0].kind == Reply::Kind::kStored);
  CHECK(host.replies[0].stored_id == sealed_id);
  CHECK(host.sealed[sealed_id] == "from the earlier attempt");

  auto unsealed_task = Task("executor_test.Big", {500});
  executor.Execute(unsealed_task);
  REQUIRE(host.replies.size() == 2);
  CHECK(host.replies[1].kind == Reply::Kind::kError);
  CHECK(host.replies[1].failure == proto::FailureKind::OTHER);
  CHECK_THAT(host.replies[1].message, Catch::Contains("earlier attempt left the result unfinished"));
  CHECK(host.log == std::vector<std::string>{"create", "check", "create", "check"});
}

TEST_CASE("a full store fails the task with STORE_FULL", "[worker][executor]") {
  // Invariant: a result that cannot be stored is a failed task (its owner
  // sees why), not a lost reply.
  FakeHost host;
  TaskReceiver receiver;
  TaskExecutor executor(host, receiver, TestOptions(/*inline_limit=*/64));
  host.create_answer = absl::ResourceExhaustedError("the object store is full");
  auto task = Task("executor_test.Big", {500});
  executor.Execute(task);
  REQUIRE(host.replies.size() == 1);
  CHECK(host.replies[0].kind == Reply::Kind::kError);
  CHECK(host.replies[0].failure == proto::FailureKind::STORE_FULL);
  CHECK(host.replies[0].message == "the object store is full");
  CHECK(host.sealed.empty());
}

TEST_CASE("stored arguments are fetched through the host, a lost one fails the task",
          "[worker][executor]") {
  // Invariant: the function sees a stored argument's bytes in argument order;
  // an argument no copy of which can be fetched fails the task with
  // OBJECT_LOST naming the object, and the function does not run.
  FakeHost host;
  TaskReceiver receiver;
  TaskExecutor executor(host, receiver, TestOptions());
  ObjectId stored = ObjectId::ForPut();
  host.sealed[stored] = codec::EncodeValue<int>(40);
  auto task = Task("executor_test.Sum", {1});
  TaskToRun::Arg arg;
  arg.is_stored = true;
  arg.stored = stored;
  task.args.push_back(arg);
  executor.Execute(task);
  REQUIRE(host.replies.size() == 1);
  REQUIRE(host.replies[0].kind == Reply::Kind::kInline);
  CHECK(host.replies[0].inline_bytes == codec::EncodeValue<int>(41));
  CHECK(host.fetches == 1);

  auto lost_task = Task("executor_test.Fails", {});
  ObjectId lost = ObjectId::ForPut();
  arg.stored = lost;
  lost_task.args.push_back(arg);
  executor.Execute(lost_task);
  REQUIRE(host.replies.size() == 2);
  CHECK(host.replies[1].kind == Reply::Kind::kError);
  CHECK(host.replies[1].failure == proto::FailureKind::OBJECT_LOST);
  CHECK(host.replies[1].exception_type == "lumen::ObjectLostError");
  CHECK_THAT(host.replies[1].message, Catch::Contains(lost.Hex()));
}

TEST_CASE("an unknown function, a function called as the wrong kind, and a throwing function fail",
          "[worker][executor]") {
  // Invariant: each failure has its kind and names what went wrong; the
  // exception a function throws reaches its owner with its type.
  FakeHost host;
  TaskReceiver receiver;
  TaskExecutor executor(host, receiver, TestOptions());
  auto unknown = Task("executor_test.NoSuchFunction", {});
  executor.Execute(unknown);
  auto wrong_kind = Task("executor_test.Sum", {1}, proto::TaskKind::ACTOR_METHOD);
  executor.Execute(wrong_kind);
  auto no_actor = Task("executor_test.Counter.Add", {1}, proto::TaskKind::ACTOR_METHOD);
  executor.Execute(no_actor);
  auto throws = Task("executor_test.Fails", {});
  executor.Execute(throws);
  REQUIRE(host.replies.size() == 4);
  for (const auto& r : host.replies) REQUIRE(r.kind == Reply::Kind::kError);
  CHECK(host.replies[0].failure == proto::FailureKind::FUNCTION_NOT_FOUND);
  CHECK_THAT(host.replies[0].message, Catch::Contains("executor_test.NoSuchFunction"));
  CHECK_THAT(host.replies[0].message, Catch::Contains("/bin/worker"));
  CHECK(host.replies[1].failure == proto::FailureKind::OTHER);
  CHECK_THAT(host.replies[1].message, Catch::Contains("not as what was called"));
  CHECK(host.replies[2].failure == proto::FailureKind::OTHER);
  CHECK_THAT(host.replies[2].message, Catch::Contains("no actor instance"));
  CHECK(host.replies[3].failure == proto::FailureKind::TASK_ERROR);
  CHECK(host.replies[3].exception_type == "std::invalid_argument");
  CHECK(host.replies[3].message == "no good");
}

TEST_CASE("an actor's calls use the instance its creation made, an exiting call is the last",
          "[worker][executor]") {
  // Invariant: calls run on the one instance in order; the call that asks to
  // exit replies with actorExiting through SendLastReplyAndExit, and calls
  // queued behind it are dropped, not run. Asking to exit outside an actor
  // method is refused.
  FakeHost host;
  TaskReceiver receiver;
  TaskExecutor executor(host, receiver, TestOptions());
  running_executor = &executor;
  CHECK(executor.ExitAfterCurrentCall().code() == absl::StatusCode::kFailedPrecondition);

  receiver.BecomeActor();
  auto create = Task("executor_test.Counter", {10}, proto::TaskKind::ACTOR_CREATION);
  create.gpu_ids = {3, 5};
  executor.Execute(create);
  auto add1 = Task("executor_test.Counter.Add", {1}, proto::TaskKind::ACTOR_METHOD);
  executor.Execute(add1);
  auto add2 = Task("executor_test.Counter.Add", {5}, proto::TaskKind::ACTOR_METHOD);
  executor.Execute(add2);
  auto queued = std::make_unique<TaskToRun>(
      Task("executor_test.Counter.Add", {100}, proto::TaskKind::ACTOR_METHOD));
  REQUIRE(receiver.Receive(std::move(queued)) == nullptr);
  REQUIRE(receiver.HasQueued());
  auto quit = Task("executor_test.Counter.Quit", {}, proto::TaskKind::ACTOR_METHOD);
  executor.Execute(quit);
  running_executor = nullptr;

  REQUIRE(host.replies.size() == 4);
  CHECK(host.replies[0].task_id == create.task_id);
  CHECK(host.replies[1].inline_bytes == codec::EncodeValue<int>(11));
  CHECK(host.replies[2].inline_bytes == codec::EncodeValue<int>(16));
  for (int i = 0; i < 3; ++i) {
    CHECK_FALSE(host.replies[i].actor_exiting);
    CHECK_FALSE(host.replies[i].last);
  }
  CHECK(host.replies[3].task_id == quit.task_id);
  CHECK(host.replies[3].actor_exiting);
  CHECK(host.replies[3].last);
  CHECK_FALSE(receiver.HasQueued());
  CHECK(receiver.TryTake() == nullptr);
}

TEST_CASE("a task sees its own GPUs, an actor's calls see those of its creation",
          "[worker][executor]") {
  // Invariant: lumen::GetGpuIds inside a task is that task's GPUs; inside an
  // actor method, the GPUs the actor's creation was given.
  FakeHost host;
  TaskReceiver receiver;
  TaskExecutor executor(host, receiver, TestOptions());
  auto task = Task("executor_test.Gpus", {});
  task.gpu_ids = {1};
  executor.Execute(task);
  receiver.BecomeActor();
  auto create = Task("executor_test.Counter", {0}, proto::TaskKind::ACTOR_CREATION);
  create.gpu_ids = {2, 7};
  executor.Execute(create);
  auto method = Task("executor_test.Counter.Gpus", {}, proto::TaskKind::ACTOR_METHOD);
  executor.Execute(method);
  REQUIRE(host.replies.size() == 3);
  CHECK(host.replies[0].inline_bytes == codec::EncodeValue<std::vector<int>>({1}));
  CHECK(host.replies[2].inline_bytes == codec::EncodeValue<std::vector<int>>({2, 7}));
}

TEST_CASE("Run takes received tasks in order until the host says stop", "[worker][executor]") {
  // Invariant: every queued task runs once, in arrival order, and Run returns
  // once ShouldStop holds (here: after the third reply).
  FakeHost host;
  host.stop_after_replies = 3;
  TaskReceiver receiver;
  TaskExecutor executor(host, receiver, TestOptions());
  std::vector<TaskId> ids;
  for (int i = 0; i < 3; ++i) {
    auto task = std::make_unique<TaskToRun>(Task("executor_test.Sum", {i}));
    ids.push_back(task->task_id);
    REQUIRE(receiver.Receive(std::move(task)) == nullptr);
  }
  executor.Run();
  REQUIRE(host.replies.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(host.replies[i].task_id == ids[i]);
    CHECK(host.replies[i].inline_bytes == codec::EncodeValue<int>(i));
  }
  CHECK_FALSE(receiver.HasQueued());
}

TEST_CASE("Run holds the replies of short tasks while more wait and sends them together, in order",
          "[worker][executor]") {
  // Invariant: while tasks wait in the receive queue, the replies of tasks
  // known to be short are held and leave in one write with the next reply
  // (at most hold_replies + 1 together; 8 here), in task order; they go before
  // a task not known to be short runs, and when the queue is empty. Every
  // task is replied to exactly once.
  FakeHost host;
  TaskReceiver receiver;
  TaskExecutor executor(host, receiver, HoldingOptions());
  auto first = Task("executor_test.Sum", {1});
  executor.Execute(first);  // Sum is known (and short) on this thread from now on
  REQUIRE(host.sends == 1);
  host.sends = 0;
  host.replies.clear();
  auto run = [&](const std::vector<std::string>& functions) {
    std::vector<TaskId> ids;
    for (size_t i = 0; i < functions.size(); ++i) {
      auto task = std::make_unique<TaskToRun>(Task(functions[i], {static_cast<int>(i)}));
      ids.push_back(task->task_id);
      REQUIRE(receiver.Receive(std::move(task)) == nullptr);
    }
    host.stop = false;
    host.sends = 0;
    host.replies.clear();
    host.stop_after_replies = functions.size();
    executor.Run();
    REQUIRE(host.replies.size() == functions.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      CHECK(host.replies[i].task_id == ids[i]);
      CHECK(host.replies[i].inline_bytes == codec::EncodeValue<int>(static_cast<int>(i)));
    }
    CHECK_FALSE(receiver.HasQueued());
  };
  // Five short tasks queued: one write.
  run(std::vector<std::string>(5, "executor_test.Sum"));
  CHECK(host.sends == 1);
  // More than hold_replies: a write per hold_replies + 1 at most.
  run(std::vector<std::string>(20, "executor_test.Sum"));
  CHECK(host.sends == 3);  // 9, 9, 2
  // A task never seen on this thread: what is held goes before it runs (its
  // length is unknown); once it ran short, its own reply may be held.
  run({"executor_test.Sum", "executor_test.Sum", "executor_test.Unseen", "executor_test.Sum"});
  CHECK(host.sends == 2);  // [Sum, Sum] before Unseen runs, then [Unseen, Sum]
  // Each batch armed the bound's timer (here never run): the first once.
  CHECK(host.timers_armed == 1);
}

TEST_CASE("a held reply leaves within max_hold while its task's successor blocks outside the runtime",
          "[worker][executor]") {
  // Invariant: a reply is held max_hold at most, whatever the executor thread
  // does. Here a known-short task waits (not in Get: the executor cannot see
  // it) for the reply the executor holds from the task before it; only the
  // host's timer can send that reply. Without the bound AwaitReply gives up
  // after 10 s and returns 0 (held replies used to deadlock here).
  FakeHost host;
  host.run_timers = true;
  TaskReceiver receiver;
  TaskExecutor executor(host, receiver, HoldingOptions(std::chrono::microseconds(500)));
  awaiting_host = &host;
  // Both functions known (and short) on this thread.
  auto warm_sum = Task("executor_test.Sum", {1});
  executor.Execute(warm_sum);
  awaited_task = warm_sum.task_id;
  auto warm_await = Task("executor_test.AwaitReply", {});
  executor.Execute(warm_await);
  REQUIRE(host.replies.size() == 2);
  REQUIRE(host.replies[1].inline_bytes == codec::EncodeValue<int>(1));

  auto sum = std::make_unique<TaskToRun>(Task("executor_test.Sum", {2, 3}));
  auto await = std::make_unique<TaskToRun>(Task("executor_test.AwaitReply", {}));
  const TaskId sum_id = sum->task_id;
  const TaskId await_id = await->task_id;
  awaited_task = sum_id;
  REQUIRE(receiver.Receive(std::move(sum)) == nullptr);
  REQUIRE(receiver.Receive(std::move(await)) == nullptr);
  host.sends = 0;
  host.replies.clear();
  host.stop_after_replies = 2;
  const auto start = std::chrono::steady_clock::now();
  executor.Run();
  const auto took = std::chrono::steady_clock::now() - start;
  host.StopTimers();
  awaiting_host = nullptr;
  REQUIRE(host.replies.size() == 2);
  CHECK(host.replies[0].task_id == sum_id);  // held, then sent by the timer
  CHECK(host.replies[0].inline_bytes == codec::EncodeValue<int>(5));
  CHECK(host.replies[1].task_id == await_id);
  CHECK(host.replies[1].inline_bytes == codec::EncodeValue<int>(1));  // it saw Sum's reply
  CHECK(host.sends == 2);
  CHECK(host.timers_armed >= 1);
  CHECK(took < std::chrono::seconds(10));
}

TEST_CASE("replies the timer and the executor thread send at once stay in order, each once",
          "[worker][executor]") {
  // Invariant: with the timer flushing held replies while the executor thread
  // holds and sends more (a bound of 1 us: it fires all the time), every task
  // is replied to exactly once, in task order (a connection's replies must
  // not pass each other).
  FakeHost host;
  host.run_timers = true;
  TaskReceiver receiver;
  TaskExecutor executor(host, receiver, HoldingOptions(std::chrono::microseconds(1)));
  auto first = Task("executor_test.Sum", {1});
  executor.Execute(first);
  host.replies.clear();
  constexpr int kTasks = 3000;
  std::vector<TaskId> ids;
  for (int i = 0; i < kTasks; ++i) {
    auto task = std::make_unique<TaskToRun>(Task("executor_test.Sum", {i}));
    ids.push_back(task->task_id);
    REQUIRE(receiver.Receive(std::move(task)) == nullptr);
  }
  host.stop_after_replies = kTasks;
  executor.Run();
  host.StopTimers();
  REQUIRE(host.replies.size() == kTasks);
  for (int i = 0; i < kTasks; ++i) {
    REQUIRE(host.replies[i].task_id == ids[i]);
    REQUIRE(host.replies[i].inline_bytes == codec::EncodeValue<int>(i));
  }
  CHECK(host.timers_armed >= 1);
}

// Whether `done` held within 10 s (polled: it reads another thread's progress).
bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST_CASE("an executor thread spins for its next task only while its tasks come one at a time",
          "[worker][executor]") {
  // Invariant: after a task, with nothing queued, the thread spins for the
  // next (a round trip's comes within microseconds) unless, within the last
  // kSpinlessTasksAfterBacklog times its queue ran dry, a task was queued
  // behind another (a pipeline feeds it: a spin would take the CPU from the
  // threads making its next tasks). The owner here sends each task once the
  // last one's reply came and the thread has chosen to spin or to block, so
  // which tasks found others queued is fixed by the test, not by timing.
  FakeHost host;
  TaskReceiver receiver;
  TaskExecutor executor(host, receiver, TestOptions());
  uint64_t seen_spins = 0;
  int blocked_runs = 0;  // times the thread chose to block (TEST_waiting went to 1)
  // Waits for `id`'s reply and for the thread to spin or block after it; true
  // when it spun.
  auto settled = [&](const TaskId& id) {
    REQUIRE(host.WaitForReply(id, std::chrono::seconds(10)));
    REQUIRE(Eventually([&] { return executor.Spins() > seen_spins || receiver.TEST_waiting() == 1; }));
    const bool spun = executor.Spins() > seen_spins;
    seen_spins = executor.Spins();
    if (!spun) ++blocked_runs;
    return spun;
  };
  // One task, sent as its owner's next round trip; true when the thread spun after it.
  auto round_trip = [&] {
    auto task = std::make_unique<TaskToRun>(Task("executor_test.Sum", {1, 2}));
    const TaskId id = task->task_id;
    REQUIRE(receiver.Receive(std::move(task)) == nullptr);
    return settled(id);
  };

  // Three tasks queued before the thread starts: a backlog.
  std::vector<TaskId> first;
  for (int i = 0; i < 3; ++i) {
    auto task = std::make_unique<TaskToRun>(Task("executor_test.Sum", {i}));
    first.push_back(task->task_id);
    REQUIRE(receiver.Receive(std::move(task)) == nullptr);
  }
  std::thread runner([&] { executor.Run(); });
  for (size_t i = 0; i + 1 < first.size(); ++i) {
    REQUIRE(host.WaitForReply(first[i], std::chrono::seconds(10)));
  }
  CHECK_FALSE(settled(first.back()));  // the queue ran dry once: no spin
  const int spinless = TaskExecutor::kSpinlessTasksAfterBacklog;
  for (int i = 1; i < spinless; ++i) CHECK_FALSE(round_trip());
  // The backlog is spinless_tasks dry queues back: round trips spin again.
  for (int i = 0; i < 5; ++i) CHECK(round_trip());

  // A backlog while it runs: two tasks arrive while a third runs.
  auto gated = std::make_unique<TaskToRun>(Task("executor_test.Gate", {}));
  REQUIRE(receiver.Receive(std::move(gated)) == nullptr);
  REQUIRE(Eventually([] { return gate_entered.load(); }));
  std::vector<TaskId> behind;
  for (int i = 0; i < 2; ++i) {
    auto task = std::make_unique<TaskToRun>(Task("executor_test.Sum", {i}));
    behind.push_back(task->task_id);
    REQUIRE(receiver.Receive(std::move(task)) == nullptr);
  }
  {
    std::lock_guard<std::mutex> lock(gate_mu);
    gate_open = true;
  }
  gate_changed.notify_all();
  REQUIRE(host.WaitForReply(behind[0], std::chrono::seconds(10)));
  CHECK_FALSE(settled(behind[1]));
  for (int i = 1; i < spinless; ++i) CHECK_FALSE(round_trip());
  CHECK(round_trip());
  CHECK(blocked_runs == 2 * spinless);

  host.stop = true;
  receiver.Stop();
  runner.join();
}

// This process's task events of `task`, drained (other tests' are dropped).
std::vector<TaskEvent> EventsOf(const TaskId& task) {
  std::vector<TaskEvent> mine;
  for (TaskEvent& e : TaskEvents().Drain()) {
    if (e.task_id == task) mine.push_back(std::move(e));
  }
  return mine;
}

TEST_CASE("a task's events travel in its reply: when it started, its phases, where it ran",
          "[worker][executor][task_events]") {
  // Invariant: a task that ends before any flush records no event in its
  // worker; its reply carries its start (system clock) and phases, which
  // add up to its run time, and the worker's pid (and for an actor call its
  // node, which the caller has no lease to learn it from).
  REQUIRE(registered);
  REQUIRE(TaskEvents().enabled());
  FakeHost host;
  TaskReceiver receiver;
  const auto options = TestOptions();
  TaskExecutor executor(host, receiver, options);
  TaskEvents().Drain();
  const int64_t before = TaskEventRecorder::NowMicros();
  auto task = Task("executor_test.Sum", {2, 3});
  executor.Execute(task);
  const int64_t after = TaskEventRecorder::NowMicros();
  REQUIRE(host.replies.size() == 1);
  const Reply& r = host.replies[0];
  CHECK(r.execution.started_us >= before);
  CHECK(r.execution.started_us <= after);
  CHECK(uint64_t{r.execution.args_fetch_us} + r.execution.run_us + r.execution.store_us ==
        r.exec_micros);
  CHECK(r.execution.started_us + static_cast<int64_t>(r.exec_micros) <= after);
  CHECK(r.worker_pid == ::getpid());
  CHECK(r.node.IsNil());  // a task's owner knows its node from the lease
  CHECK(EventsOf(task.task_id).empty());

  auto creation = Task("executor_test.Counter", {10}, proto::TaskKind::ACTOR_CREATION);
  executor.Execute(creation);
  auto call = Task("executor_test.Counter.Add", {5}, proto::TaskKind::ACTOR_METHOD);
  executor.Execute(call);
  REQUIRE(host.replies.size() == 3);
  CHECK(host.replies[2].execution.started_us >= before);
  CHECK(host.replies[2].node == options.node_id);
  CHECK(host.replies[2].worker_pid == ::getpid());
  CHECK(EventsOf(call.task_id).empty());
}

TEST_CASE("a task running at a flush is recorded by its worker, once, and its reply carries none",
          "[worker][executor][task_events]") {
  // Invariant: exactly one side records a task's executor events: a flush
  // that finds it running records its STARTED (so a long task shows as
  // running) and the worker its end; its reply then carries no events (the
  // owner would record them a second time).
  REQUIRE(registered);
  FakeHost host;
  TaskReceiver receiver;
  TaskExecutor executor(host, receiver, TestOptions());
  gate_entered = false;
  gate_open = false;
  TaskEvents().Drain();
  CHECK(executor.RecordRunningTasks() == 0);  // nothing runs
  auto task = Task("executor_test.Gate", {});
  std::thread runner([&] { executor.Execute(task); });
  REQUIRE(Eventually([] { return gate_entered.load(); }));
  CHECK(executor.RecordRunningTasks() == 1);
  CHECK(executor.RecordRunningTasks() == 0);  // recorded already
  {
    std::lock_guard<std::mutex> lock(gate_mu);
    gate_open = true;
  }
  gate_changed.notify_all();
  runner.join();
  REQUIRE(host.replies.size() == 1);
  CHECK(host.replies[0].inline_bytes == codec::EncodeValue<int>(1));
  CHECK(host.replies[0].execution.started_us == 0);
  std::vector<TaskEvent> events = EventsOf(task.task_id);
  std::vector<TaskEventKind> kinds;
  for (const TaskEvent& e : events) kinds.push_back(e.kind);
  CHECK(kinds == std::vector<TaskEventKind>{TaskEventKind::kStarted, TaskEventKind::kArgsFetched,
                                            TaskEventKind::kExecuted,
                                            TaskEventKind::kResultStored});
  REQUIRE_FALSE(events.empty());
  CHECK(events[0].name == "executor_test.Gate");
  CHECK(events[0].pid == ::getpid());
  CHECK(events[0].attempt == 2);
  // The next task, not running at a flush, is carried by its reply again.
  auto next = Task("executor_test.Sum", {1});
  executor.Execute(next);
  REQUIRE(host.replies.size() == 2);
  CHECK(host.replies[1].execution.started_us != 0);
  CHECK(EventsOf(next.task_id).empty());
}
}  // namespace
}  // namespace lumen::runtime
