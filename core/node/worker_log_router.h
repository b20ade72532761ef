// WorkerLogRouter: what the node's worker processes write to stdout and
// stderr. Each worker's two streams come to the daemon through pipes; the
// router reads them on the io thread, cuts them into lines (LogLineSplitter),
// appends them to <session>/logs/worker-<pid>.out and .err (RotatingLogFile,
// rotated at LUMEN_LOG_MAX_BYTES), and forwards them, batched, to the driver
// of the worker's job when it asked for them in its hello (`logToDriver`).
//
//   WorkerLogRouter logs(io, clients, node_id, {.log_dir = session + "/logs"});
//   logs.AddWorker(pid, job, stdout_read_fd, stderr_read_fd);  // owns the fds
//   logs.SetDriver(job, conn_id, /*wants_logs=*/true);
//   logs.FlushJob(job);   // a driver's flush request: send what is there now
//
// Forwarding never blocks the daemon: a driver whose connection has more than
// `max_driver_queue_bytes` queued (it does not read) gets no more lines until
// it catches up; the lines are dropped and counted, and the next batch says
// how many (the files keep them all). A task or actor name comes from the
// markers the worker writes (lumen/common/log_markers.h).
//
// Only on the node daemon's io thread. Borrows `io` and `clients` (both
// outlive it).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio.hpp>

#include "absl/container/flat_hash_map.h"
#include "core/node/client_registry.h"
#include "core/node/log_line_splitter.h"
#include "core/node/rotating_log_file.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"
#include "lumen/proto/lumen.capnp.h"

namespace lumen::node {

struct WorkerLogRouterOptions {
  std::string log_dir;                       // <session>/logs (created if missing)
  uint64_t max_file_bytes = WorkerLogMaxBytes();
  size_t max_line_bytes = LogLineSplitter::kDefaultMaxLineBytes;
  // Beyond this many bytes queued for a driver (on its connection and here),
  // lines are dropped for it.
  size_t max_driver_queue_bytes = 4u << 20;
  // A batch goes out this long after its first line, or at once past batch_bytes.
  std::chrono::milliseconds batch_delay{20};
  size_t batch_bytes = 256u << 10;
};

// One line as `lumen logs` or a driver gets it.
struct WorkerLogLine {
  pid_t pid = 0;
  bool is_stderr = false;
  std::string text;
  std::string name;  // task or actor name, or ""
};

class WorkerLogRouter {
 public:
  WorkerLogRouter(boost::asio::io_context& io, ClientRegistry& clients, NodeId node,
                  WorkerLogRouterOptions options);
  ~WorkerLogRouter();
  WorkerLogRouter(const WorkerLogRouter&) = delete;
  WorkerLogRouter& operator=(const WorkerLogRouter&) = delete;

  // A worker of `job` started with its stdout and stderr on pipes whose read
  // ends are `stdout_fd` and `stderr_fd`; the router owns (and closes) them.
  void AddWorker(pid_t pid, const JobId& job, int stdout_fd, int stderr_fd);
  // The driver of `job` is connection `conn_id`; it gets lines if `wants_logs`.
  void SetDriver(const JobId& job, uint64_t conn_id, bool wants_logs);
  // A connection closed: if it was a driver, nothing more is queued for it.
  void OnConnectionClosed(uint64_t conn_id);
  // Reads what the pipes of `job`'s workers hold now and sends the driver its
  // batch at once (queued on its connection before whatever is sent next).
  void FlushJob(const JobId& job);
  // `lumen logs`: the end (at most `max_bytes`) of each file of this node's
  // workers, of one worker (`pid` != 0) or of one actor (`actor` not empty).
  std::vector<WorkerLogLine> ReadFiles(pid_t pid, const std::string& actor,
                                       uint64_t max_bytes) const;
  // `lumen logs`: the query's lines (ReadFiles, at most 16 MiB read), the
  // newest that fit one reply frame, into `batch`.
  void AnswerQuery(proto::WorkerLogQuery::Reader query, proto::WorkerLogBatch::Builder batch) const;
  // Stops reading (the daemon is exiting); the files stay.
  void Stop();

  uint64_t dropped_lines() const { return total_dropped_; }

 private:
  struct Stream {
    Stream(boost::asio::io_context& io, int fd, std::string path, const WorkerLogRouterOptions& o,
           bool is_stderr);
    boost::asio::posix::stream_descriptor pipe;
    LogLineSplitter splitter;
    RotatingLogFile file;
    std::string file_buffer;  // what the current read adds to the file
    bool is_stderr;
    bool open = true;
  };
  struct WorkerLog {
    pid_t pid = 0;
    JobId job;
    std::string name;   // from the last marker
    std::string actor;  // the actor this worker holds, if any
    std::unique_ptr<Stream> out, err;
  };
  struct DriverQueue {
    uint64_t conn = 0;
    bool wants_logs = false;
    std::vector<WorkerLogLine> lines;
    size_t bytes = 0;
    uint64_t dropped = 0;
  };

  void WaitReadable(WorkerLog& w, Stream& s);
  // Reads until the pipe is empty (or `budget` bytes); false at end of stream.
  bool Drain(WorkerLog& w, Stream& s, size_t budget);
  void OnLine(WorkerLog& w, Stream& s, std::string_view text, bool complete);
  void CloseStream(WorkerLog& w, Stream& s);
  void Forward(WorkerLog& w, bool is_stderr, std::string_view text);
  void SendBatch(DriverQueue& q);
  void ArmBatchTimer();
  void SendAllBatches();

  ThreadChecker io_thread_;
  boost::asio::io_context& io_;
  ClientRegistry& clients_;
  const NodeId node_;
  const WorkerLogRouterOptions options_;
  boost::asio::steady_timer batch_timer_;
  bool batch_timer_armed_ = false;
  bool stopped_ = false;
  // Workers by pid; kept after their pipes closed (their names, for `lumen
  // logs --actor`), the oldest closed ones forgotten past kMaxClosed.
  absl::flat_hash_map<pid_t, std::unique_ptr<WorkerLog>> workers_;
  std::deque<pid_t> closed_;
  absl::flat_hash_map<JobId, DriverQueue> drivers_;
  uint64_t total_dropped_ = 0;
  static constexpr size_t kMaxClosed = 4096;
};

}  // namespace lumen::node
