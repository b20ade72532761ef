// HeadConnectionPool: the connections to heads that CallHead keeps open
// between calls, so that a burst of control requests from one process
// (placement groups created, waited on and removed one call at a time) pays a
// round trip per request, not a connect, a hello, an accept and a close.
//
//   HeadConnectionPool& pool = HeadConnectionPool::Instance();
//   int fd = pool.Take("127.0.0.1:6379");   // -1: none idle, connect anew
//   ... write the request, read the whole reply ...
//   pool.Give("127.0.0.1:6379", fd);        // kept for the next call (or closed)
//
// A connection is given back only after its reply was read whole, so an idle
// one has nothing in flight: when Take finds it readable (the head closed it:
// a restart, a stop) it closes it and tries the next. A connection given as
// `write_checks` (a Unix stream: a write to it fails with EPIPE, delivering
// nothing, once the head closed it) is handed out without that poll; its
// taker replaces it when the request's write fails. At most
// kIdlePerAddress idle connections per head are kept; more are closed.
// Connections a parent process pooled before a fork are never handed to the
// child (each entry remembers the process that gave it; the child leaves
// them alone, the parent still owns them).
//
// Thread-safe (one mutex; Take and Give do not block on I/O beyond a poll
// with no timeout).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace lumen::runtime {

class HeadConnectionPool {
 public:
  static constexpr size_t kIdlePerAddress = 4;

  // The process's pool (never destroyed: its descriptors close at exit).
  static HeadConnectionPool& Instance();

  // An idle, still open connection to `address` (blocking descriptor, hello
  // already sent), now the caller's; -1 when there is none. `reply_ms`, when
  // given, gets the receive timeout its last user set on it (Give's), 0 when
  // none was set: a caller with the same timeout need not set it again.
  // `write_checks`, when given, says whether it was handed out unpolled
  // (Give's `write_checks`): a failed write of the request then means the
  // head had closed it and got nothing.
  int Take(const std::string& address, int64_t* reply_ms = nullptr, bool* write_checks = nullptr);
  // `fd`, a connection to `address` with nothing in flight, is kept for a
  // later Take (the caller no longer owns it); closed when enough are idle.
  // `reply_ms`: the receive timeout (SO_RCVTIMEO) set on it, 0 when unknown.
  void Give(const std::string& address, int fd, int64_t reply_ms = 0, bool write_checks = false);
  // Closes every idle connection this process gave (lumen::Shutdown).
  void Clear();
  // Idle connections kept for `address` (tests).
  size_t IdleCount(const std::string& address);

 private:
  struct Idle {
    int fd;
    pid_t owner;       // the process that gave it (a forked child leaves it alone)
    int64_t reply_ms;  // its SO_RCVTIMEO in ms, 0 when unknown
    bool write_checks;  // a closed one fails the next write: Take need not poll it
  };
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::vector<Idle>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lumen::runtime
