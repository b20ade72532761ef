#include "lumen/objectstore/segment_reserver.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/format_bytes.h"
#include "lumen/common/logging.h"
#include "lumen/objectstore/object_table.h"

namespace lumen::objectstore {
namespace {

uint64_t MemAvailable() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

// The first word of a file as a number; nullopt when absent or "max".
std::optional<uint64_t> ReadNumber(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  uint64_t value = 0;
  if (!(in >> word) || !absl::SimpleAtoi(word, &value)) return std::nullopt;
  return value;
}

// What this process's memory cgroup may still take, or nullopt without a limit.
std::optional<uint64_t> CgroupHeadroom() {
  // cgroup v2 (unified), as seen from inside a container: the root of the
  // namespace is the container's cgroup.
  std::optional<uint64_t> limit = ReadNumber("/sys/fs/cgroup/memory.max");
  std::optional<uint64_t> usage = ReadNumber("/sys/fs/cgroup/memory.current");
  if (!limit) {
    limit = ReadNumber("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    usage = ReadNumber("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  // v1 says "no limit" with a huge number (LONG_MAX rounded to pages).
  if (!limit || *limit >= (1ull << 60)) return std::nullopt;
  uint64_t used = usage.value_or(0);
  return *limit > used ? *limit - used : 0;
}

}  // namespace

uint64_t AvailableMemoryBytes() {
  uint64_t available = MemAvailable();
  if (std::optional<uint64_t> headroom = CgroupHeadroom()) {
    available = available == 0 ? *headroom : std::min(available, *headroom);
  }
  return available;
}

bool MemoryLimitedByCgroup() {
  std::optional<uint64_t> headroom = CgroupHeadroom();
  return headroom.has_value() && *headroom < MemAvailable();
}

SegmentReserver::SegmentReserver(const ShmSegment* segment, Options options)
    : segment_(segment), options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
}

SegmentReserver::~SegmentReserver() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

absl::Status SegmentReserver::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

void SegmentReserver::Run() {
  // Lowest CPU priority for this thread only (both are per thread on Linux):
  // reserving a 7 GiB store costs seconds of a core, spent in the kernel,
  // right when a new cluster starts its workers and runs its first work; on a
  // small machine it would take that CPU from them (issue 8: actor creation on
  // 2 cores ran at ~60% of its rate while the reservation ran). SCHED_IDLE
  // runs it only on a core nothing else wants (niceness 19 still took ~1.5%
  // of a busy core and, more to the point, got a slice whenever it woke);
  // niceness kNiceness stays as the fallback where SCHED_IDLE is refused.
  // The pages are still all reserved, later when the node is idle.
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kNiceness) != 0) {
    LUMEN_LOG(DEBUG) << "cannot lower the store reserver's priority: " << std::strerror(errno);
  }
  sched_param idle{};
  idle.sched_priority = 0;
  if (int err = ::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &idle); err != 0) {
    LUMEN_LOG(DEBUG) << "cannot run the store reserver under SCHED_IDLE: " << std::strerror(err);
  }
  const uint64_t size = segment_->size();
  const uint64_t chunk = std::max<uint64_t>(options_.chunk, 1);
  auto available = options_.available_memory ? options_.available_memory : AvailableMemoryBytes;
  absl::Status status;
  uint64_t offset = 0;
  while (offset < size && !stop_.load(std::memory_order_acquire)) {
    const uint64_t length = std::min(chunk, size - offset);
    // Pages already reserved (by creates) cost nothing more; counting them
    // again only makes the check stricter.
    if (uint64_t left = available(); left != 0 && left < length + options_.keep_free) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "stopped reserving the object store's memory at ", FormatBytes(offset), " of ",
          FormatBytes(size), ": only ", FormatBytes(left),
          " of memory is left on this machine; the rest is reserved object by object"));
      break;
    }
    if (absl::Status s = segment_->Reserve(offset, length); !s.ok()) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "stopped reserving the object store's memory at ", FormatBytes(offset), " of ",
          FormatBytes(size), ": ", s.message(), "; the rest is reserved object by object"));
      break;
    }
    offset += length;
    reserved_.store(offset, std::memory_order_release);
  }
  if (!status.ok()) LUMEN_LOG(WARNING) << status.message();
  {
    absl::MutexLock lock(&mu_);
    status_ = status;
  }
  done_.store(true, std::memory_order_release);
}

}  // namespace lumen::objectstore
