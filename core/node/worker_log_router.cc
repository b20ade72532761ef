#include "core/node/worker_log_router.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/connection.h"
#include "lumen/common/log_markers.h"
#include "lumen/common/logging.h"
#include "lumen/common/proto_util.h"

namespace lumen::node {

namespace asio = boost::asio;

WorkerLogRouter::Stream::Stream(asio::io_context& io, int fd, std::string path,
                                const WorkerLogRouterOptions& o, bool is_stderr)
    : pipe(io, fd),
      splitter(o.max_line_bytes),
      file(std::move(path), o.max_file_bytes),
      is_stderr(is_stderr) {
  boost::system::error_code ignored;
  pipe.non_blocking(true, ignored);
}

WorkerLogRouter::WorkerLogRouter(asio::io_context& io, ClientRegistry& clients, NodeId node,
                                 WorkerLogRouterOptions options)
    : io_(io), clients_(clients), node_(node), options_(std::move(options)), batch_timer_(io) {
  std::error_code ec;
  std::filesystem::create_directories(options_.log_dir, ec);
}

WorkerLogRouter::~WorkerLogRouter() { Stop(); }

void WorkerLogRouter::AddWorker(pid_t pid, const JobId& job, int stdout_fd, int stderr_fd) {
  io_thread_.Check("WorkerLogRouter::AddWorker");
  if (stopped_) {
    ::close(stdout_fd);
    ::close(stderr_fd);
    return;
  }
  auto w = std::make_unique<WorkerLog>();
  w->pid = pid;
  w->job = job;
  std::string base = absl::StrCat(options_.log_dir, "/worker-", pid);
  w->out = std::make_unique<Stream>(io_, stdout_fd, base + ".out", options_, false);
  w->err = std::make_unique<Stream>(io_, stderr_fd, base + ".err", options_, true);
  // A pid seen before (reused by the kernel): the new worker replaces it.
  closed_.erase(std::remove(closed_.begin(), closed_.end(), pid), closed_.end());
  while (closed_.size() > kMaxClosed) {
    workers_.erase(closed_.front());
    closed_.pop_front();
  }
  WorkerLog& ref = *w;
  workers_[pid] = std::move(w);
  WaitReadable(ref, *ref.out);
  WaitReadable(ref, *ref.err);
}

void WorkerLogRouter::WaitReadable(WorkerLog& w, Stream& s) {
  // Handlers find their worker again by pid: a record may be gone by then.
  s.pipe.async_wait(asio::posix::stream_descriptor::wait_read,
                    [this, pid = w.pid, is_stderr = s.is_stderr,
                     stream = &s](const boost::system::error_code& ec) {
                      if (ec || stopped_) return;
                      auto it = workers_.find(pid);
                      if (it == workers_.end()) return;
                      WorkerLog& w = *it->second;
                      Stream& s = is_stderr ? *w.err : *w.out;
                      if (&s != stream || !s.open) return;
                      // A flood of output is read in slices, so one worker
                      // cannot hold the io thread.
                      if (Drain(w, s, 1u << 20)) WaitReadable(w, s);
                    });
}

bool WorkerLogRouter::Drain(WorkerLog& w, Stream& s, size_t budget) {
  if (!s.open) return false;
  char buf[65536];
  size_t taken = 0;
  bool more = true;
  while (taken < budget) {
    ssize_t n = ::read(s.pipe.native_handle(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      more = false;
      break;
    }
    taken += static_cast<size_t>(n);
    s.splitter.Feed(std::string_view(buf, static_cast<size_t>(n)),
                    [&](std::string_view text, bool complete) { OnLine(w, s, text, complete); });
  }
  if (!more) {
    s.splitter.Finish([&](std::string_view text, bool complete) { OnLine(w, s, text, complete); });
  }
  if (!s.file_buffer.empty()) {
    if (absl::Status st = s.file.Write(s.file_buffer); !st.ok()) {
      LUMEN_LOG(WARNING) << "worker output lost: " << st;
    }
    s.file_buffer.clear();
  }
  if (!more) CloseStream(w, s);
  return more;
}

void WorkerLogRouter::OnLine(WorkerLog& w, Stream& s, std::string_view text, bool complete) {
  // A marker is a whole line of its own (written with one write(2)).
  if (complete && text.substr(0, kLogMarkerTask.size()) == kLogMarkerTask) {
    w.name = std::string(text.substr(kLogMarkerTask.size()));
    return;
  }
  if (complete && text.substr(0, kLogMarkerActor.size()) == kLogMarkerActor) {
    w.actor = std::string(text.substr(kLogMarkerActor.size()));
    w.name = w.actor;
    return;
  }
  s.file_buffer.append(text);
  if (complete) s.file_buffer.push_back('\n');
  Forward(w, s.is_stderr, text);
}

void WorkerLogRouter::CloseStream(WorkerLog& w, Stream& s) {
  if (!s.open) return;
  s.open = false;
  boost::system::error_code ignored;
  s.pipe.close(ignored);
  if (w.out->open || w.err->open) return;
  closed_.push_back(w.pid);
}

void WorkerLogRouter::SetDriver(const JobId& job, uint64_t conn_id, bool wants_logs) {
  io_thread_.Check("WorkerLogRouter::SetDriver");
  DriverQueue& q = drivers_[job];
  q.conn = conn_id;
  q.wants_logs = wants_logs;
  q.lines.clear();
  q.bytes = 0;
}

void WorkerLogRouter::OnConnectionClosed(uint64_t conn_id) {
  io_thread_.Check("WorkerLogRouter::OnConnectionClosed");
  for (auto it = drivers_.begin(); it != drivers_.end();) {
    if (it->second.conn == conn_id) {
      drivers_.erase(it++);
    } else {
      ++it;
    }
  }
}

void WorkerLogRouter::Forward(WorkerLog& w, bool is_stderr, std::string_view text) {
  auto it = drivers_.find(w.job);
  if (it == drivers_.end() || !it->second.wants_logs) return;
  DriverQueue& q = it->second;
  Connection* conn = clients_.Find(q.conn);
  if (conn == nullptr) return;
  if (conn->send_queue_bytes() + q.bytes + text.size() > options_.max_driver_queue_bytes) {
    ++q.dropped;
    ++total_dropped_;
    return;
  }
  q.lines.push_back(WorkerLogLine{w.pid, is_stderr, std::string(text), w.name});
  q.bytes += text.size() + w.name.size() + 16;
  if (q.bytes >= options_.batch_bytes) {
    SendBatch(q);
  } else {
    ArmBatchTimer();
  }
}

void WorkerLogRouter::SendBatch(DriverQueue& q) {
  if (q.lines.empty() && q.dropped == 0) return;
  Connection* conn = clients_.Find(q.conn);
  if (conn == nullptr || conn->closed()) {
    q.lines.clear();
    q.bytes = 0;
    return;
  }
  OutMessage out;
  auto batch = out.Init().initWorkerLogs();
  batch.setNodeId(DataOf(node_));
  batch.setDropped(q.dropped);
  auto lines = batch.initLines(static_cast<unsigned>(q.lines.size()));
  for (size_t i = 0; i < q.lines.size(); ++i) {
    lines[i].setPid(q.lines[i].pid);
    lines[i].setStderr(q.lines[i].is_stderr);
    lines[i].setText(q.lines[i].text);
    lines[i].setName(q.lines[i].name);
  }
  conn->Send(out.builder());
  q.lines.clear();
  q.bytes = 0;
  q.dropped = 0;
}

void WorkerLogRouter::ArmBatchTimer() {
  if (batch_timer_armed_) return;
  batch_timer_armed_ = true;
  batch_timer_.expires_after(options_.batch_delay);
  batch_timer_.async_wait([this](const boost::system::error_code& ec) {
    batch_timer_armed_ = false;
    if (ec || stopped_) return;
    SendAllBatches();
  });
}

void WorkerLogRouter::SendAllBatches() {
  for (auto& [job, q] : drivers_) SendBatch(q);
}

void WorkerLogRouter::FlushJob(const JobId& job) {
  io_thread_.Check("WorkerLogRouter::FlushJob");
  std::vector<pid_t> pids;
  for (const auto& [pid, w] : workers_) {
    if (w->job == job) pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    auto it = workers_.find(pid);
    if (it == workers_.end()) continue;
    WorkerLog& w = *it->second;
    // What the pipes hold now; the waits already armed stay armed.
    if (w.out->open) Drain(w, *w.out, 16u << 20);
    if (w.err->open) Drain(w, *w.err, 16u << 20);
  }
  auto q = drivers_.find(job);
  if (q != drivers_.end()) SendBatch(q->second);
}

std::vector<WorkerLogLine> WorkerLogRouter::ReadFiles(pid_t pid, const std::string& actor,
                                                      uint64_t max_bytes) const {
  std::vector<WorkerLogLine> lines;
  std::vector<std::pair<pid_t, bool>> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.log_dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("worker-", 0) != 0) continue;
    bool is_err = absl::EndsWith(name, ".err");
    if (!is_err && !absl::EndsWith(name, ".out")) continue;
    int file_pid = 0;
    if (!absl::SimpleAtoi(name.substr(7, name.size() - 11), &file_pid)) continue;
    if (pid != 0 && file_pid != pid) continue;
    if (!actor.empty()) {
      auto w = workers_.find(file_pid);
      if (w == workers_.end() || w->second->actor != actor) continue;
    }
    files.emplace_back(file_pid, is_err);
  }
  std::sort(files.begin(), files.end());
  for (const auto& [file_pid, is_err] : files) {
    std::string path = absl::StrCat(options_.log_dir, "/worker-", file_pid, is_err ? ".err" : ".out");
    std::ifstream in(path, std::ios::binary);
    if (!in) continue;
    in.seekg(0, std::ios::end);
    auto size = static_cast<uint64_t>(std::max<std::streamoff>(0, in.tellg()));
    uint64_t start = size > max_bytes ? size - max_bytes : 0;
    in.seekg(static_cast<std::streamoff>(start));
    std::string text(size - start, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
    if (start > 0) {
      // Cut at the first whole line.
      size_t nl = text.find('\n');
      text.erase(0, nl == std::string::npos ? text.size() : nl + 1);
    }
    std::string name;
    if (auto w = workers_.find(file_pid); w != workers_.end()) {
      name = w->second->actor;
    }
    size_t begin = 0;
    while (begin < text.size()) {
      size_t nl = text.find('\n', begin);
      size_t end = nl == std::string::npos ? text.size() : nl;
      lines.push_back(WorkerLogLine{file_pid, is_err, text.substr(begin, end - begin), name});
      begin = end + 1;
    }
  }
  return lines;
}

void WorkerLogRouter::Stop() {
  if (stopped_) return;
  batch_timer_.cancel();
  // What the pipes still hold (the workers were just stopped) goes to the files.
  for (auto& [pid, w] : workers_) {
    if (w->out->open) Drain(*w, *w->out, 16u << 20);
    if (w->err->open) Drain(*w, *w->err, 16u << 20);
  }
  stopped_ = true;
  boost::system::error_code ignored;
  for (auto& [pid, w] : workers_) {
    for (Stream* s : {w->out.get(), w->err.get()}) {
      if (!s->open) continue;
      // A line not yet ended by a newline still goes to the file.
      s->splitter.Finish([&](std::string_view text, bool) { s->file_buffer.append(text); });
      if (!s->file_buffer.empty()) {
        if (absl::Status written = s->file.Write(s->file_buffer); !written.ok()) {
          LUMEN_LOG(WARNING) << "the last output of worker " << w->pid << " is not in its log file: "
                             << written;
        }
      }
      s->open = false;
      s->pipe.close(ignored);
    }
  }
}

void WorkerLogRouter::AnswerQuery(proto::WorkerLogQuery::Reader query,
                                  proto::WorkerLogBatch::Builder batch) const {
  uint64_t max_bytes = query.getMaxBytes() > 0 ? query.getMaxBytes() : uint64_t{1} << 20;
  std::vector<WorkerLogLine> lines = ReadFiles(query.getWorkerPid(), query.getActorName().cStr(),
                                               std::min<uint64_t>(max_bytes, 16u << 20));
  // One reply frame: keep the newest lines that fit well under the frame limit.
  size_t total = 0, first = lines.size();
  while (first > 0 && total + lines[first - 1].text.size() + 64 < (48u << 20)) {
    total += lines[--first].text.size() + 64;
  }
  auto list = batch.initLines(static_cast<unsigned>(lines.size() - first));
  for (size_t i = first; i < lines.size(); ++i) {
    auto l = list[static_cast<unsigned>(i - first)];
    l.setPid(lines[i].pid);
    l.setStderr(lines[i].is_stderr);
    l.setText(lines[i].text);
    l.setName(lines[i].name);
  }
}

}  // namespace lumen::node
