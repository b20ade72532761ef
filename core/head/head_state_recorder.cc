#include "core/head/head_state_recorder.h"

#include <chrono>

#include "lumen/common/logging.h"

namespace lumen::head {

absl::StatusOr<HeadState> HeadStateRecorder::Load() {
  if (!store_) return HeadState{};
  return store_->Load();
}

void HeadStateRecorder::Put(HeadTable table, std::string key, std::string value) {
  if (!store_) return;
  Append({table, std::move(key), std::move(value), false});
}

void HeadStateRecorder::Delete(HeadTable table, std::string key) {
  if (!store_) return;
  Append({table, std::move(key), "", true});
}

void HeadStateRecorder::Snapshot() {
  if (!store_) return;
  if (absl::Status s = store_->Snapshot(); !s.ok()) {
    LUMEN_LOG(WARNING) << "head: cannot snapshot its state (" << store_->Describe()
                       << "): " << s.message();
  }
}

void HeadStateRecorder::Append(const HeadRecord& record) {
  absl::Status s = store_->Append(record);
  if (s.ok()) return;
  ++failed_appends_;
  static auto* limiter = new logging::RateLimiter(1, std::chrono::seconds(10));
  uint64_t suppressed = 0;
  if (limiter->Allow(&suppressed)) {
    LUMEN_LOG(ERROR) << "head: cannot persist a change of its " << HeadTableName(record.table)
                     << " table (" << store_->Describe() << "): " << s.message()
                     << "; a restarted head will not have it (" << suppressed
                     << " more suppressed)";
  }
}

std::string HeadStateRecorder::JoinKey(const std::string& ns, const std::string& key) {
  std::string joined = ns;
  joined.push_back('\0');
  joined += key;
  return joined;
}

std::pair<std::string, std::string> HeadStateRecorder::SplitKey(const std::string& joined) {
  size_t nul = joined.find('\0');
  if (nul == std::string::npos) return {"", joined};
  return {joined.substr(0, nul), joined.substr(nul + 1)};
}

std::string HeadStateRecorder::Pack(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) {
    uint32_t n = static_cast<uint32_t>(p.size());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
    out += p;
  }
  return out;
}

bool HeadStateRecorder::Unpack(const std::string& packed, std::vector<std::string>* parts) {
  parts->clear();
  size_t at = 0;
  while (at < packed.size()) {
    if (packed.size() - at < 4) return false;
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) {
      n |= static_cast<uint32_t>(static_cast<uint8_t>(packed[at + i])) << (8 * i);
    }
    at += 4;
    if (packed.size() - at < n) return false;
    parts->push_back(packed.substr(at, n));
    at += n;
  }
  return true;
}

}  // namespace lumen::head
