// Every timeout and period of the runtime, in one place, so tests can shrink
// them (health check 100 ms x 5) and operators can tune them.
//
// Each field has an environment override, read by FromEnv(); doc/configuration.md
// lists them all. Components take a Timeouts (or the fields they use) in their
// options struct; nothing reads these variables anywhere else.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace lumen {

// The longest timeout the runtime uses: 100 years, "forever" in practice, and
// far enough below the ~292 years a signed count of nanoseconds holds that a
// deadline of now() + kMaxTimeout, or a few of them added, cannot overflow.
inline constexpr std::chrono::milliseconds kMaxTimeout{100ll * 365 * 24 * 3600 * 1000};

struct Timeouts {
  using ms = std::chrono::milliseconds;

  // --- connections (every listener) ---
  ms hello_timeout{5000};         // LUMEN_HELLO_TIMEOUT_MS: an accepted peer must say hello
  ms send_stall_timeout{30000};   // LUMEN_SEND_STALL_TIMEOUT_MS: a peer that reads nothing
  ms connect_timeout{5000};       // LUMEN_CONNECT_TIMEOUT_MS: a TCP or Unix connect
  // LUMEN_HEAD_CALL_TIMEOUT_MS: a request to the head, asynchronous (a driver's
  // or worker's io thread) or blocking (CallHead from user threads and the CLI:
  // its reply, and the sending of the request).
  ms head_call_timeout{5000};
  // LUMEN_NODE_CALL_TIMEOUT_MS: a blocking request of the CLI to a node daemon
  // (`lumen status`, `list`, `logs`, `timeline`): its reply must come within
  // this (the node itself waits list_state_timeout for its processes).
  ms node_call_timeout{5000};
  // LUMEN_PARKED_REPLY_MARGIN_MS: a request the head parks (a key-value Wait, a
  // placement group's Wait) carries its own timeout; the caller waits for the
  // reply that timeout plus this.
  ms parked_reply_margin{5000};
  // LUMEN_SLOW_HANDLER_WARNING_MS: a posted handler (lumen::Post) holding its
  // event loop longer than this is logged by name.
  ms slow_handler_warning{100};

  // --- head ---
  ms health_check_period{500};      // LUMEN_HEALTH_CHECK_PERIOD_MS
  int health_check_failure_threshold = 5;  // LUMEN_HEALTH_CHECK_FAILURE_THRESHOLD
  // LUMEN_MAX_PARKED_WAIT_MS: the longest the head parks a client's wait (a
  // key-value Wait, a placement group's Wait), whatever timeout it asked for.
  ms max_parked_wait{24ll * 3600 * 1000};
  // LUMEN_HTTP_REQUEST_TIMEOUT_MS: an HTTP client of the head (GET /metrics)
  // must send its request, and read the answer, within this.
  ms http_request_timeout{10000};
  // LUMEN_HEAD_RESTORED_NODE_GRACE_MS: a head restarted from its persisted
  // state keeps the nodes it restored alive this long, for them to reconnect,
  // before its health checks count their silence (doc/reliability.md, item 6).
  ms restored_node_grace{10000};

  // --- node daemon ---
  ms report_period{500};            // LUMEN_REPORT_PERIOD_MS: node -> head reports
  ms worker_idle_timeout{10000};    // LUMEN_WORKER_IDLE_TIMEOUT_MS: surplus idle workers exit
  ms worker_reap_period{1000};      // LUMEN_WORKER_REAP_PERIOD_MS: how often idle workers are checked
  ms head_retry_period{1000};       // LUMEN_HEAD_RETRY_PERIOD_MS: reconnect to a lost head after
  // LUMEN_HEAD_RETRY_MAX_PERIOD_MS: the reconnect backoff doubles from
  // head_retry_period up to this (or head_retry_period, if that is longer).
  ms head_retry_max_period{2000};
  // LUMEN_HEAD_RECONNECT_TIMEOUT_MS: a node daemon, driver or worker that lost
  // the head retries (with backoff from head_retry_period, doubling up to
  // head_retry_max_period) this long for it to come back, then gives up with an
  // error naming the head.
  ms head_reconnect_timeout{60000};
  ms list_state_timeout{2000};      // LUMEN_LIST_STATE_TIMEOUT_MS: `lumen list` waits for local processes
  ms max_worker_exit_wait{10000};   // LUMEN_MAX_WORKER_EXIT_WAIT_MS: cap on a getWorkerExit wait
  ms worker_kill_wait{2000};        // LUMEN_WORKER_KILL_WAIT_MS: at shutdown, for the killed workers to exit
  // LUMEN_OWNER_PROBE_PERIOD_MS: how often a node checks whether a remote
  // owner whose connection closed still lives (its objects stay until it is
  // found dead; doc/reliability.md, item 4).
  ms owner_probe_period{500};
  // LUMEN_FORK_SERVER_REPLY_TIMEOUT_MS: the node daemon's io thread waits this
  // long (blocking: a bounded wait on its loop) for a worker template to answer
  // a fork request (core/node/worker_fork_server.h); the forked worker waits as
  // long to be adopted by the daemon.
  ms fork_server_reply_timeout{2000};
  // LUMEN_PULL_RETRY_DELAY_MS / LUMEN_PULL_RETRY_LIMIT_MS: a pull whose source
  // node has the object spilled (it restores it first) is asked again after
  // the delay, for at most the limit since its first try (objectstore/
  // pull_manager.h).
  ms pull_retry_delay{10};
  ms pull_retry_limit{60000};

  // --- driver / worker ---
  ms lease_idle_timeout{200};       // LUMEN_LEASE_IDLE_TIMEOUT_MS: an idle lease is kept this long
  ms worker_exit_cause_timeout{2000};  // LUMEN_WORKER_EXIT_CAUSE_TIMEOUT_MS: how a dead worker ended
  ms lease_retry_delay{20};         // LUMEN_LEASE_RETRY_DELAY_MS: a node said "retry" to a lease
  ms spillback_retry_delay{50};     // LUMEN_SPILLBACK_RETRY_DELAY_MS: the spillback target is gone
  ms exit_flush_timeout{2000};      // LUMEN_EXIT_FLUSH_TIMEOUT_MS: an exiting actor flushes replies
  // LUMEN_TASK_EVENT_FLUSH_PERIOD_MS: how often a driver or worker sends its
  // task events to its node daemon (doc/observability.md).
  ms task_event_flush_period{1000};

  // --- head's external storage ---
  // LUMEN_REDIS_TIMEOUT_MS: a head keeping its tables in Redis (hiredis,
  // blocking) connects, and waits for each command's reply, at most this: a
  // bounded wait on the head's loop (core/head/redis_head_store.cc).
  ms redis_timeout{5000};

  // --- command line (core/cli/) ---
  // LUMEN_START_WAIT_MS: `lumen start` waits this long for the head to list
  // the node it started (so that a driver started next finds it).
  ms start_wait{10000};
  // LUMEN_STOP_WAIT_MS: `lumen stop` gives each process it sent SIGTERM this
  // long to exit, then sends SIGKILL.
  ms stop_wait{10000};

  // --- microbenchmark (bench/) ---
  // LUMEN_BENCH_WAIT_TIMEOUT_MS: the longest `lumen microbenchmark` waits for
  // its cluster's nodes to register, or for a placement group (Ray's 30 s).
  ms bench_wait_timeout{30000};

  // The defaults above, each replaced by its environment variable when that is
  // set to a number.
  static Timeouts FromEnv();
};

// A timeout a caller gave, as a duration that any deadline can be built from:
// negative is 0, beyond kMaxTimeout ("forever", e.g. milliseconds::max()) is
// kMaxTimeout.
inline std::chrono::milliseconds ClampTimeout(std::chrono::milliseconds timeout) {
  return std::clamp(timeout, std::chrono::milliseconds(0), kMaxTimeout);
}

// A timeout a peer sent (an unsigned wire field, in milliseconds), at most
// ClampTimeout(cap): compared before it becomes a duration, so that no value
// overflows one (2^64 - 1 ms is a negative count of nanoseconds;
// head_dispatch_fuzzer found it in the head's key-value Wait).
inline std::chrono::milliseconds CappedWireTimeout(uint64_t wire_ms,
                                                   std::chrono::milliseconds cap) {
  cap = ClampTimeout(cap);
  if (wire_ms >= static_cast<uint64_t>(cap.count())) return cap;
  return std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(wire_ms));
}

// period x count, at most kMaxTimeout (a health check's silence limit:
// period x failure threshold, both from the environment); 0 when either is.
inline std::chrono::milliseconds TimesCapped(std::chrono::milliseconds period, int count) {
  if (count <= 0 || period.count() <= 0) return std::chrono::milliseconds(0);
  period = std::min(period, kMaxTimeout);
  return period > kMaxTimeout / count ? kMaxTimeout : period * count;
}

// now() + timeout on the steady clock, without overflow (ClampTimeout).
inline std::chrono::steady_clock::time_point DeadlineAfter(std::chrono::milliseconds timeout) {
  return std::chrono::steady_clock::now() + ClampTimeout(timeout);
}

}  // namespace lumen
