// WorkerForkServer: starts worker processes by forking an already loaded
// "template" process of the job's binary instead of exec'ing the binary.
//
// An exec'd worker pays ~11 ms of CPU before it runs its first line of Lumen
// code (fork+exec of a big binary, the dynamic loader's relocations, static
// initialisers); a fork of a process that already did all that costs well
// under a millisecond. The template is the job's binary started with
// LUMEN_ROLE=worker-template: it runs the user's main up to lumen::Init, where
// it stays single-threaded and serves fork requests on a socket pair
// (lumen/node/worker_template.h is that side). Each forked worker applies the
// request's environment, stdout/stderr and oom_score_adj and then starts like
// an exec'd worker (CoreWorker::Start).
//
//   WorkerForkServer forks({.template_env = worker_env});   // in the node daemon
//   absl::StatusOr<pid_t> pid = forks.Fork({.executable = exe, .env = ..., ...});
//   if (absl::IsUnavailable(pid.status())) { /* no template ready: exec instead */ }
//
// The worker is made a child of this process (the template vforks a middle
// process that forks the worker and exits at once, so the worker is re-parented to us: the
// node daemon is a child subreaper, PR_SET_CHILD_SUBREAPER, set by the
// constructor), so waitpid, SIGCHLD and PR_SET_PDEATHSIG work for it as for
// an exec'd worker, and a template that dies takes no worker with it.
//
// Templates are started lazily, one per executable (at most max_templates,
// the least recently used retired first): the first Fork for an executable
// starts one and returns Unavailable, as do the Forks until it reports ready
// (the caller execs meanwhile, so nothing waits for a template). A template
// that died, refused (it was not single-threaded at lumen::Init), did not
// answer within reply_timeout or whose binary changed on disk is retired
// (killed) and restarted on the next Fork; after max_failures failures in a
// row for one executable it is not restarted (the caller execs, with a
// warning logged once).
//
// Not thread-safe: the node daemon's io thread only. Fork blocks that thread
// for one round trip with the template (a vfork and a fork in it, under 1 ms idle;
// at most reply_timeout: a bounded wait on the loop, doc/configuration.md).
//
// A template that dies or times out after it took a request may still have
// forked that worker: Fork then returns Aborted, and the caller must not
// start another process under the same worker id (two processes with one id
// bind the same socket name, and the exit of one tears down the other's
// registration); WorkerPool::StartWorker starts it under a new id, and a
// late twin is refused at its hello (the pool does not know its id).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace lumen::node {

// One worker to fork from the template of `executable`.
struct ForkRequest {
  std::string executable;
  // Set in the worker (setenv) before it starts; a pair with an empty value
  // sets the variable to "" (as an exec'd worker's environment has it).
  std::vector<std::pair<std::string, std::string>> env;
  int stdout_fd = -1;  // -1: the template's
  int stderr_fd = -1;
  int oom_score_adj = 500;
};

// What a process launcher needs from a fork server (tests substitute fakes).
class WorkerForker {
 public:
  virtual ~WorkerForker() = default;
  // The new worker's pid. Unavailable: no template is ready for this
  // executable (yet, or any more): the caller starts the worker another way.
  // Aborted: a template took the request and then died or did not answer;
  // the worker may be running: the caller must not start another with its id.
  [[nodiscard]] virtual absl::StatusOr<pid_t> Fork(const ForkRequest& request) = 0;
  // Kills the templates and waits for them (bounded).
  virtual void Stop() = 0;
};

struct WorkerForkServerOptions {
  // The environment overrides a template starts with (an exec'd worker's,
  // less what each fork sets).
  std::vector<std::pair<std::string, std::string>> template_env;
  // How long Fork waits (blocking the io thread) for a template's answer:
  // Timeouts::fork_server_reply_timeout (LUMEN_FORK_SERVER_REPLY_TIMEOUT_MS).
  std::chrono::milliseconds reply_timeout{2000};
  size_t max_templates = 4;
  int max_failures = 3;
};

class WorkerForkServer : public WorkerForker {
 public:
  explicit WorkerForkServer(WorkerForkServerOptions options);
  ~WorkerForkServer() override;
  WorkerForkServer(const WorkerForkServer&) = delete;
  WorkerForkServer& operator=(const WorkerForkServer&) = delete;

  absl::StatusOr<pid_t> Fork(const ForkRequest& request) override;
  void Stop() override;

  // False when LUMEN_WORKER_FORK_SERVER=0 (every worker is exec'd).
  static bool EnabledByEnv();

  // Workers forked so far (tests, stats).
  uint64_t num_forked() const { return num_forked_; }
  // Templates started so far, restarts included (tests).
  uint64_t num_templates_started() const { return num_templates_started_; }
  // The pid of the live template for `executable`, or 0 (tests: to kill it).
  pid_t TemplatePid(const std::string& executable) const;

 private:
  enum class State { kStarting, kReady };
  struct Template {
    std::string executable;
    pid_t pid = 0;
    int fd = -1;  // our end of the socket pair
    State state = State::kStarting;
    // The binary as it was when the template started (a rebuilt binary gets a new one).
    uint64_t dev = 0, ino = 0, size = 0;
    int64_t mtime_ns = 0;
  };
  struct Failures {
    std::string executable;
    int in_a_row = 0;
    bool warned = false;
  };

  // Starts a template for `executable` (at the front of templates_).
  [[nodiscard]] absl::Status StartTemplate(const std::string& executable);
  // Kills, reaps (bounded) and forgets the template; `failed` counts it
  // against its executable, `why` is logged.
  void Retire(std::list<Template>::iterator it, bool failed, const std::string& why);
  // Reads the template's "ready" (or "refused") without blocking; false
  // while it is still starting, or when it was retired.
  bool CheckReady(std::list<Template>::iterator it);
  absl::StatusOr<pid_t> ForkFrom(std::list<Template>::iterator it, const ForkRequest& request);
  Failures& FailuresOf(const std::string& executable);

  const WorkerForkServerOptions options_;
  std::list<Template> templates_;  // most recently used first
  std::vector<Failures> failures_;
  uint64_t num_forked_ = 0;
  uint64_t num_templates_started_ = 0;
  bool subreaper_ = true;  // false: forked workers could not be ours, so none are forked
};

}  // namespace lumen::node
