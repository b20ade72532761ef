#include "lumen/common/timeouts.h"

#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"

namespace lumen {
namespace {

void Override(const char* name, std::chrono::milliseconds* value) {
  const char* v = std::getenv(name);
  int64_t parsed = 0;
  if (v != nullptr && absl::SimpleAtoi(v, &parsed) && parsed >= 0) {
    // Larger values mean "forever": kMaxTimeout keeps deadlines from overflowing.
    *value = ClampTimeout(std::chrono::milliseconds(parsed));
  }
}

void Override(const char* name, int* value) {
  const char* v = std::getenv(name);
  int parsed = 0;
  if (v != nullptr && absl::SimpleAtoi(v, &parsed) && parsed > 0) *value = parsed;
}

}  // namespace

Timeouts Timeouts::FromEnv() {
  Timeouts t;
  Override("LUMEN_HELLO_TIMEOUT_MS", &t.hello_timeout);
  Override("LUMEN_SEND_STALL_TIMEOUT_MS", &t.send_stall_timeout);
  Override("LUMEN_CONNECT_TIMEOUT_MS", &t.connect_timeout);
  Override("LUMEN_HEAD_CALL_TIMEOUT_MS", &t.head_call_timeout);
  Override("LUMEN_NODE_CALL_TIMEOUT_MS", &t.node_call_timeout);
  Override("LUMEN_PARKED_REPLY_MARGIN_MS", &t.parked_reply_margin);
  Override("LUMEN_HEALTH_CHECK_PERIOD_MS", &t.health_check_period);
  Override("LUMEN_HEALTH_CHECK_FAILURE_THRESHOLD", &t.health_check_failure_threshold);
  Override("LUMEN_MAX_PARKED_WAIT_MS", &t.max_parked_wait);
  Override("LUMEN_HTTP_REQUEST_TIMEOUT_MS", &t.http_request_timeout);
  Override("LUMEN_REPORT_PERIOD_MS", &t.report_period);
  Override("LUMEN_WORKER_IDLE_TIMEOUT_MS", &t.worker_idle_timeout);
  Override("LUMEN_WORKER_REAP_PERIOD_MS", &t.worker_reap_period);
  Override("LUMEN_HEAD_RETRY_PERIOD_MS", &t.head_retry_period);
  Override("LUMEN_HEAD_RETRY_MAX_PERIOD_MS", &t.head_retry_max_period);
  Override("LUMEN_HEAD_RECONNECT_TIMEOUT_MS", &t.head_reconnect_timeout);
  Override("LUMEN_HEAD_RESTORED_NODE_GRACE_MS", &t.restored_node_grace);
  Override("LUMEN_LIST_STATE_TIMEOUT_MS", &t.list_state_timeout);
  Override("LUMEN_MAX_WORKER_EXIT_WAIT_MS", &t.max_worker_exit_wait);
  Override("LUMEN_OWNER_PROBE_PERIOD_MS", &t.owner_probe_period);
  Override("LUMEN_WORKER_KILL_WAIT_MS", &t.worker_kill_wait);
  Override("LUMEN_FORK_SERVER_REPLY_TIMEOUT_MS", &t.fork_server_reply_timeout);
  Override("LUMEN_PULL_RETRY_DELAY_MS", &t.pull_retry_delay);
  Override("LUMEN_PULL_RETRY_LIMIT_MS", &t.pull_retry_limit);
  Override("LUMEN_LEASE_IDLE_TIMEOUT_MS", &t.lease_idle_timeout);
  Override("LUMEN_WORKER_EXIT_CAUSE_TIMEOUT_MS", &t.worker_exit_cause_timeout);
  Override("LUMEN_LEASE_RETRY_DELAY_MS", &t.lease_retry_delay);
  Override("LUMEN_SPILLBACK_RETRY_DELAY_MS", &t.spillback_retry_delay);
  Override("LUMEN_EXIT_FLUSH_TIMEOUT_MS", &t.exit_flush_timeout);
  Override("LUMEN_TASK_EVENT_FLUSH_PERIOD_MS", &t.task_event_flush_period);
  Override("LUMEN_SLOW_HANDLER_WARNING_MS", &t.slow_handler_warning);
  Override("LUMEN_BENCH_WAIT_TIMEOUT_MS", &t.bench_wait_timeout);
  Override("LUMEN_REDIS_TIMEOUT_MS", &t.redis_timeout);
  Override("LUMEN_START_WAIT_MS", &t.start_wait);
  Override("LUMEN_STOP_WAIT_MS", &t.stop_wait);
  return t;
}

}  // namespace lumen
