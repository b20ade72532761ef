// RedisHeadStore: the head's state in an external Redis server
// (`lumen start --head --external-storage redis://HOST:PORT[/NAMESPACE]`), the
// second HeadStore next to the write-ahead log, as Ray's GCS keeps its tables
// in Redis for fault tolerance. Built only when hiredis is found
// (LUMEN_HAVE_HIREDIS).
//
//   ASSIGN_OR_RETURN(std::unique_ptr<HeadStore> store,
//                    RedisHeadStore::FromUrl("redis://127.0.0.1:6380", 5s));
//
// Layout: one Redis hash per table, "<namespace>:head:<table>" (namespace
// "lumen" unless the URL names one), field = the entry's key, value = its
// value (binary-safe). Append is one HSET or HDEL answered by the server
// before the head replies to its client; durability is the server's own
// (its appendonly / fsync settings). Snapshot does nothing (Redis holds the
// state itself). A command that fails for a lost connection reconnects once
// and is sent again (HSET/HDEL are idempotent).
//
// Not thread-safe: owned by the head's event loop. Blocking: each call waits
// for the server (bounded by a 5 s timeout per command).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "core/head/head_store.h"

struct redisContext;

namespace lumen::head {

class RedisHeadStore : public HeadStore {
 public:
  // Parses redis://HOST:PORT[/NAMESPACE] and connects. Errors:
  // InvalidArgument (a malformed URL), Unavailable (no server there).
  // `timeout` (Timeouts::redis_timeout, LUMEN_REDIS_TIMEOUT_MS) bounds the
  // connect and each command's reply: hiredis blocks, so each Append is a
  // bounded wait on the head's io thread.
  static absl::StatusOr<std::unique_ptr<HeadStore>> FromUrl(const std::string& url,
                                                            std::chrono::milliseconds timeout);

  ~RedisHeadStore() override;
  RedisHeadStore(const RedisHeadStore&) = delete;
  RedisHeadStore& operator=(const RedisHeadStore&) = delete;

  absl::StatusOr<HeadState> Load() override;
  [[nodiscard]] absl::Status Append(const HeadRecord& record) override;
  [[nodiscard]] absl::Status Snapshot() override { return absl::OkStatus(); }
  std::string Describe() const override;

 private:
  RedisHeadStore(std::string host, int port, std::string ns, std::chrono::milliseconds timeout);
  [[nodiscard]] absl::Status Connect();
  std::string HashKey(HeadTable table) const;

  std::string host_;
  int port_;
  std::string ns_;
  std::chrono::milliseconds timeout_;
  redisContext* context_ = nullptr;
};

}  // namespace lumen::head
