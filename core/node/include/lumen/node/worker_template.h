// The worker template: the template side of the node daemon's fork server
// (core/node/worker_fork_server.h). A job's binary started with
// LUMEN_ROLE=worker-template runs its main up to lumen::Init, which calls
// MaybeServeWorkerForks: there the process, single-threaded and fully loaded,
// forks one worker per request from the node daemon. Each forked worker
// returns from MaybeServeWorkerForks with its environment, stdout/stderr and
// oom_score_adj set as an exec'd worker's would be, and goes on to start as a
// worker (LUMEN_ROLE=worker).
//
//   void InitRuntime(...) {
//     node::MaybeServeWorkerForks();   // returns at once unless a template
//     if (Env("LUMEN_ROLE") == "worker") RunWorker();
//
// Wire format on the SOCK_SEQPACKET pair (one message each):
//   template -> daemon, once: "ready", or "refused <why>" (then it exits)
//   daemon -> template: "<oom_score_adj>\0<nfds>\0" then KEY\0VALUE\0 pairs;
//                       SCM_RIGHTS carries nfds (0 or 2) fds: stdout, stderr
//   template -> daemon: "pid <worker pid>" or "error <why>"
#pragma once

namespace lumen::node {

inline constexpr const char* kWorkerTemplateRole = "worker-template";
// Set (with LD_BIND_NOW=1) when the daemon asked the dynamic loader to bind
// every symbol at the template's start; its workers unset both.
inline constexpr const char* kTemplateBindNowEnv = "LUMEN_TEMPLATE_BIND_NOW";
// A template's process name (comm) while it serves; its workers take the
// binary's name back.
inline constexpr const char* kWorkerTemplateProcessName = "lumen-template";
// The template's end of the socket pair (a descriptor number).
inline constexpr const char* kForkServerFdEnv = "LUMEN_FORK_SERVER_FD";

// In a worker template: serves forks until the daemon closes the socket (then
// exits); returns only in a forked worker. In any other process: returns at once.
void MaybeServeWorkerForks();

}  // namespace lumen::node
