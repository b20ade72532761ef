#include "core/head/file_head_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "lumen/common/logging.h"

namespace lumen::head {
namespace {

constexpr uint8_t kOpPut = 1;
constexpr uint8_t kOpDelete = 2;
constexpr size_t kHeaderBytes = 8;     // u32 length, u32 crc
constexpr size_t kBodyFixedBytes = 6;  // u8 table, u8 op, u32 key length
constexpr uint32_t kMaxBodyBytes = 1u << 30;

// CRC-32 (IEEE 802.3, reflected, as zlib's crc32).
uint32_t Crc32(const char* data, size_t size) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) {
    crc = table[(crc ^ static_cast<uint8_t>(data[i])) & 0xFF] ^ (crc >> 8);
  }
  return crc ^ 0xFFFFFFFFu;
}

void PutU32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const std::string& bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("cannot write " + path);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path, bool* exists) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *exists = false;
    if (errno == ENOENT) return std::string();
    return Errno("cannot open " + path);
  }
  *exists = true;
  std::string data;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status s = Errno("cannot read " + path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return data;
}

// Replays the records of `data` into `state`; returns the offset after the
// last whole record (data.size() when every record is whole).
size_t Replay(const std::string& data, HeadState* state, std::string* damage) {
  size_t at = 0;
  while (at < data.size()) {
    if (data.size() - at < kHeaderBytes) {
      *damage = absl::StrCat("a record header cut short (", data.size() - at, " bytes)");
      return at;
    }
    uint32_t length = GetU32(data.data() + at);
    uint32_t crc = GetU32(data.data() + at + 4);
    if (length < kBodyFixedBytes || length > kMaxBodyBytes) {
      *damage = absl::StrCat("a record of impossible length ", length);
      return at;
    }
    if (data.size() - at - kHeaderBytes < length) {
      *damage = absl::StrCat("a record of ", length, " bytes cut short to ",
                             data.size() - at - kHeaderBytes);
      return at;
    }
    const char* body = data.data() + at + kHeaderBytes;
    if (Crc32(body, length) != crc) {
      *damage = "a record failing its CRC";
      return at;
    }
    uint8_t table = static_cast<uint8_t>(body[0]);
    uint8_t op = static_cast<uint8_t>(body[1]);
    uint32_t key_length = GetU32(body + 2);
    if (table == 0 || table > kMaxHeadTable || (op != kOpPut && op != kOpDelete) ||
        key_length > length - kBodyFixedBytes) {
      *damage = absl::StrCat("a record with table ", table, ", op ", op);
      return at;
    }
    HeadRecord record;
    record.table = static_cast<HeadTable>(table);
    record.deleted = op == kOpDelete;
    record.key.assign(body + kBodyFixedBytes, key_length);
    record.value.assign(body + kBodyFixedBytes + key_length, length - kBodyFixedBytes - key_length);
    ApplyRecord(record, state);
    at += kHeaderBytes + length;
  }
  return at;
}

}  // namespace

void FileHeadStore::EncodeRecord(const HeadRecord& record, std::string* out) {
  std::string body;
  body.reserve(kBodyFixedBytes + record.key.size() + record.value.size());
  body.push_back(static_cast<char>(record.table));
  body.push_back(static_cast<char>(record.deleted ? kOpDelete : kOpPut));
  PutU32(static_cast<uint32_t>(record.key.size()), &body);
  body += record.key;
  if (!record.deleted) body += record.value;
  PutU32(static_cast<uint32_t>(body.size()), out);
  PutU32(Crc32(body.data(), body.size()), out);
  *out += body;
}

FileHeadStore::FileHeadStore(Options options) : options_(std::move(options)) {}

FileHeadStore::~FileHeadStore() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

std::string FileHeadStore::Describe() const {
  return absl::StrCat("write-ahead log in ", options_.dir);
}

absl::StatusOr<HeadState> FileHeadStore::Load() {
  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create the head's state directory ",
                                            options_.dir, ": ", ec.message()));
  }
  state_.clear();
  bool exists = false;
  auto snapshot = ReadFile(Path("snapshot"), &exists);
  if (!snapshot.ok()) return snapshot.status();
  std::string damage;
  if (Replay(*snapshot, &state_, &damage) != snapshot->size()) {
    return absl::DataLossError(
        absl::StrCat("the head's snapshot ", Path("snapshot"), " is damaged: ", damage));
  }
  auto log = ReadFile(Path("wal"), &exists);
  if (!log.ok()) return log.status();
  size_t whole = Replay(*log, &state_, &damage);
  log_fd_ = ::open(Path("wal").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (log_fd_ < 0) return Errno("cannot open " + Path("wal"));
  if (whole != log->size()) {
    LUMEN_LOG(WARNING) << "head: ignoring the end of its write-ahead log " << Path("wal")
                       << " from byte " << whole << " of " << log->size() << " (" << damage
                       << "; the head died while writing it)";
    if (::ftruncate(log_fd_, static_cast<off_t>(whole)) != 0) {
      return Errno("cannot cut back " + Path("wal"));
    }
  }
  if (::lseek(log_fd_, static_cast<off_t>(whole), SEEK_SET) < 0) {
    return Errno("cannot seek in " + Path("wal"));
  }
  log_bytes_ = whole;
  size_t entries = 0;
  for (const auto& [table, rows] : state_) entries += rows.size();
  if (exists || !snapshot->empty()) {
    LUMEN_LOG(INFO) << "head: restored " << entries << " entries from " << Describe() << " ("
                    << snapshot->size() << " bytes of snapshot, " << whole << " of log)";
  }
  return state_;
}

absl::Status FileHeadStore::Append(const HeadRecord& record) {
  if (log_fd_ < 0) return absl::FailedPreconditionError("the head's log is not open (Load first)");
  std::string bytes;
  EncodeRecord(record, &bytes);
  if (auto s = WriteAll(log_fd_, bytes, Path("wal")); !s.ok()) return s;
  if (options_.fsync_each_record && ::fdatasync(log_fd_) != 0) {
    return Errno("cannot sync " + Path("wal"));
  }
  log_bytes_ += bytes.size();
  ApplyRecord(record, &state_);
  if (log_bytes_ >= options_.snapshot_log_bytes) return Snapshot();
  return absl::OkStatus();
}

absl::Status FileHeadStore::Snapshot() {
  if (log_fd_ < 0) return absl::FailedPreconditionError("the head's log is not open (Load first)");
  std::string bytes;
  for (const auto& [table, rows] : state_) {
    for (const auto& [key, value] : rows) EncodeRecord({table, key, value, false}, &bytes);
  }
  const std::string tmp = Path("snapshot.tmp");
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create " + tmp);
  absl::Status written = WriteAll(fd, bytes, tmp);
  if (written.ok() && ::fsync(fd) != 0) written = Errno("cannot sync " + tmp);
  ::close(fd);
  if (!written.ok()) return written;
  if (::rename(tmp.c_str(), Path("snapshot").c_str()) != 0) return Errno("cannot rename " + tmp);
  int dir = ::open(options_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  // The snapshot holds everything the log did: empty the log.
  if (::ftruncate(log_fd_, 0) != 0 || ::lseek(log_fd_, 0, SEEK_SET) < 0) {
    return Errno("cannot empty " + Path("wal"));
  }
  log_bytes_ = 0;
  ++snapshots_;
  return absl::OkStatus();
}

}  // namespace lumen::head
