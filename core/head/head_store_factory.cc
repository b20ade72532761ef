#include "core/head/head_store_factory.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/head/file_head_store.h"
#ifdef LUMEN_HAVE_HIREDIS
#include "core/head/redis_head_store.h"
#endif

namespace lumen::head {

absl::StatusOr<std::unique_ptr<HeadStore>> MakeHeadStore(const HeadOptions& options) {
  if (!options.external_storage.empty()) {
    if (!absl::StartsWith(options.external_storage, "redis://")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown external storage '", options.external_storage, "' (want redis://HOST:PORT)"));
    }
#ifdef LUMEN_HAVE_HIREDIS
    return RedisHeadStore::FromUrl(options.external_storage, options.timeouts.redis_timeout);
#else
    return absl::FailedPreconditionError(absl::StrCat(
        "--external-storage ", options.external_storage,
        ": this build of lumen has no Redis support (hiredis was not found when it was built; "
        "install libhiredis-dev and rebuild)"));
#endif
  }
  if (options.persistence == "none") return std::unique_ptr<HeadStore>();
  if (options.persistence != "wal" && !options.persistence.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown head persistence '", options.persistence, "' (want wal or none)"));
  }
  std::string dir = options.state_dir;
  if (dir.empty()) {
    if (options.session_dir.empty()) {
      return absl::FailedPreconditionError(
          "the head's write-ahead log needs a session directory or LUMEN_HEAD_STATE_DIR");
    }
    dir = options.session_dir + "/head_state";
  }
  FileHeadStore::Options file{.dir = dir};
  uint64_t bytes = 0;
  if (const char* v = std::getenv("LUMEN_HEAD_WAL_SNAPSHOT_BYTES");
      v != nullptr && absl::SimpleAtoi(v, &bytes) && bytes > 0) {
    file.snapshot_log_bytes = bytes;
  }
  if (const char* v = std::getenv("LUMEN_HEAD_WAL_FSYNC"); v != nullptr) {
    file.fsync_each_record = std::string(v) == "1";
  }
  return std::unique_ptr<HeadStore>(std::make_unique<FileHeadStore>(file));
}

}  // namespace lumen::head
