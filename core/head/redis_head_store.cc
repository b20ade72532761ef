#include "core/head/redis_head_store.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lumen/common/logging.h"

namespace lumen::head {
namespace {

// Frees a hiredis reply at scope exit.
struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r != nullptr) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

}  // namespace

absl::StatusOr<std::unique_ptr<HeadStore>> RedisHeadStore::FromUrl(
    const std::string& url, std::chrono::milliseconds timeout) {
  const std::string scheme = "redis://";
  if (url.rfind(scheme, 0) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", url, "' is not redis://HOST:PORT"));
  }
  std::string rest = url.substr(scheme.size());
  std::string ns = "lumen";
  if (auto slash = rest.find('/'); slash != std::string::npos) {
    if (slash + 1 < rest.size()) ns = rest.substr(slash + 1);
    rest.resize(slash);
  }
  auto colon = rest.rfind(':');
  int port = 6379;
  std::string host = rest;
  if (colon != std::string::npos) {
    host = rest.substr(0, colon);
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &port) || port <= 0 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("bad port in '", url, "'"));
    }
  }
  if (host.empty()) return absl::InvalidArgumentError(absl::StrCat("no host in '", url, "'"));
  std::unique_ptr<RedisHeadStore> store(new RedisHeadStore(host, port, ns, timeout));
  if (auto s = store->Connect(); !s.ok()) return s;
  return std::unique_ptr<HeadStore>(std::move(store));
}

RedisHeadStore::RedisHeadStore(std::string host, int port, std::string ns,
                               std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port), ns_(std::move(ns)), timeout_(timeout) {}

RedisHeadStore::~RedisHeadStore() {
  if (context_ != nullptr) redisFree(context_);
}

std::string RedisHeadStore::Describe() const {
  return absl::StrCat("Redis at ", host_, ":", port_, " (keys ", ns_, ":head:*)");
}

std::string RedisHeadStore::HashKey(HeadTable table) const {
  return absl::StrCat(ns_, ":head:", HeadTableName(table));
}

absl::Status RedisHeadStore::Connect() {
  if (context_ != nullptr) {
    redisFree(context_);
    context_ = nullptr;
  }
  const int64_t ms = std::max<int64_t>(1, timeout_.count());
  timeval timeout{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
  context_ = redisConnectWithTimeout(host_.c_str(), port_, timeout);
  if (context_ == nullptr || context_->err != 0) {
    std::string why = context_ != nullptr ? context_->errstr : "out of memory";
    if (context_ != nullptr) redisFree(context_);
    context_ = nullptr;
    return absl::UnavailableError(
        absl::StrCat("cannot reach Redis at ", host_, ":", port_, ": ", why));
  }
  redisSetTimeout(context_, timeout);
  return absl::OkStatus();
}

absl::StatusOr<HeadState> RedisHeadStore::Load() {
  HeadState state;
  size_t entries = 0;
  for (uint8_t t = 1; t <= kMaxHeadTable; ++t) {
    const HeadTable table = static_cast<HeadTable>(t);
    const std::string key = HashKey(table);
    Reply reply(
        static_cast<redisReply*>(redisCommand(context_, "HGETALL %b", key.data(), key.size())));
    if (!reply) {
      return absl::UnavailableError(
          absl::StrCat("Redis at ", host_, ":", port_, ": ", context_->errstr));
    }
    if (reply->type == REDIS_REPLY_ERROR) {
      return absl::InternalError(absl::StrCat("Redis HGETALL ", key, ": ", reply->str));
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements % 2 != 0) {
      return absl::DataLossError(absl::StrCat("Redis HGETALL ", key, ": unexpected reply"));
    }
    auto& rows = state[table];
    for (size_t i = 0; i + 1 < reply->elements; i += 2) {
      const redisReply* f = reply->element[i];
      const redisReply* v = reply->element[i + 1];
      rows[std::string(f->str, f->len)] = std::string(v->str, v->len);
      ++entries;
    }
  }
  if (entries > 0) LUMEN_LOG(INFO) << "head: read " << entries << " entries from " << Describe();
  return state;
}

absl::Status RedisHeadStore::Append(const HeadRecord& record) {
  const std::string key = HashKey(record.table);
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (context_ == nullptr) {
      if (auto s = Connect(); !s.ok()) return s;
    }
    Reply reply(static_cast<redisReply*>(
        record.deleted
            ? redisCommand(context_, "HDEL %b %b", key.data(), key.size(), record.key.data(),
                           record.key.size())
            : redisCommand(context_, "HSET %b %b %b", key.data(), key.size(), record.key.data(),
                           record.key.size(), record.value.data(), record.value.size())));
    if (reply) {
      if (reply->type == REDIS_REPLY_ERROR) {
        return absl::InternalError(absl::StrCat("Redis: ", reply->str));
      }
      return absl::OkStatus();
    }
    // The connection failed: once more on a new one.
    LUMEN_LOG(WARNING) << "head: lost Redis at " << host_ << ":" << port_ << " ("
                       << context_->errstr << "); reconnecting";
    redisFree(context_);
    context_ = nullptr;
  }
  return absl::UnavailableError(absl::StrCat("Redis at ", host_, ":", port_, " is unreachable"));
}

}  // namespace lumen::head
