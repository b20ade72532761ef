// PullManager: copies objects from other nodes' stores into this node's store,
// through objectstore/transfer.*. One copy per object at a time: later readers
// of an object already being pulled wait for the same copy.
//
//   PullManager pulls(store, transfer_client, [&](const std::string& node) {
//     return TransferAddressOf(node);   // Unavailable when dead or unknown
//   });
//   pulls.Pull(id, source_node, size, job, [](const absl::Status& s) { reply(s); });
//   pulls.OnNodeDied(node, "the only copy was on node ab12, which died");
//
// A reader's answer is OK once the object is sealed here; a failed copy
// answers Unavailable with the cause. The copy's memory may wait for room in
// this store (StoreServer::BeginPullIn); a source that has the object spilled
// answers Aborted while it restores it, and the copy is retried. Only on the node daemon's io thread
// (checked in debug builds); answers run on it too. Borrows the store and the
// transfer client, which must outlive it (or Stop() is called first).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lumen/common/ids.h"
#include "lumen/common/thread_checker.h"
#include "lumen/objectstore/store_server.h"
#include "lumen/objectstore/transfer.h"

namespace lumen::objectstore {

class PullManager {
 public:
  // Answers one reader of a pull; runs once.
  using Answer = std::function<void(const absl::Status&)>;
  // The transfer address of an alive node (its id bytes); Unavailable (naming
  // why: dead, unknown) when the copy there cannot be reached.
  using SourceLookup = std::function<absl::StatusOr<std::string>(const std::string& node)>;

  // Runs a function on the io thread after a delay (a retry).
  using Later = std::function<void(std::chrono::milliseconds, std::function<void()>)>;

  // When a copy whose source had it spilled to disk is asked for again (the
  // source answers Aborted while it restores it): after `delay`, for at most
  // `limit` since its first try (Timeouts::pull_retry_delay / pull_retry_limit,
  // LUMEN_PULL_RETRY_DELAY_MS / LUMEN_PULL_RETRY_LIMIT_MS).
  struct Retry {
    std::chrono::milliseconds delay{10};
    std::chrono::milliseconds limit{60000};
  };

  // `later` schedules those retries.
  PullManager(StoreServer& store, TransferClient& transfer, SourceLookup lookup, Later later,
              Retry retry);

  PullManager(const PullManager&) = delete;
  PullManager& operator=(const PullManager&) = delete;

  // Makes object `id` (`size` bytes, created by `job`) local by copying it from
  // `source_node`, or joins the copy already running; `answer` runs when it is
  // sealed here (OK, also at once when it already is) or the copy failed.
  void Pull(const ObjectId& id, const std::string& source_node, uint64_t size, const JobId& job,
            Answer answer);

  // `node` died: readers of copies from it are answered now with `why` (a
  // frozen node keeps its sockets open); each copy's memory is given back only
  // when its transfer ends.
  void OnNodeDied(const std::string& node, const std::string& why);

  // The daemon is stopping: transfers that end from now on are ignored.
  void Stop() { stopped_ = true; }

 private:
  struct InFlight {
    std::string source;     // node id bytes
    std::string address;    // its transfer address
    JobId job;
    int64_t first_try_us = 0;  // steady clock, for the retry limit
    bool answered = false;  // its readers were told it failed (the copy still runs)
    std::vector<Answer> readers;
    uint64_t size = 0;
    int64_t started_us = 0;  // for its PULL task event (system clock)
  };
  void Finish(const ObjectId& id, absl::Status status);
  // Allocates the copy's memory (it may wait for room), then starts the transfer.
  void Start(const ObjectId& id);
  static void AnswerAll(std::vector<Answer>& readers, const absl::Status& status);

  ThreadChecker io_thread_;
  StoreServer& store_;
  TransferClient& transfer_;
  SourceLookup lookup_;
  Later later_;
  const Retry retry_;
  absl::flat_hash_map<ObjectId, InFlight> pulls_;
  bool stopped_ = false;
};

}  // namespace lumen::objectstore
