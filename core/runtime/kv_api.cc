// lumen::kv: the public key-value API, one request to the head per call.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lumen/worker/core_worker.h"
#include "lumen/common/head_client.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/timeouts.h"
#include "lumen/lumen.h"

namespace lumen::kv {
namespace {

std::string HeadAddress() {
  std::shared_ptr<runtime::CoreWorker> core = runtime::CurrentCoreWorker();
  if (core == nullptr) throw Error("lumen is not initialized: call lumen::Init first");
  // A request (a Wait above all) may wait on what the replies a task's
  // thread holds back lead its owner to do: they go first.
  core->FlushHeldReplies();
  std::string head = internal::ClusterAddress();
  if (head.empty()) head = core->head_address();
  if (head.empty()) throw KvError("key-value request failed: this process knows no head address");
  return head;
}

struct Result {
  bool found = false;
  std::string value;
  std::vector<std::string> keys;
  uint64_t count = 0;
};

// Sends one request; throws KvError with the head's text on an error reply.
Result Call(proto::KvOp op, const std::string& ns, const std::string& key,
            const std::string* value = nullptr, bool overwrite = true,
            std::chrono::milliseconds wait_timeout = std::chrono::milliseconds(0)) {
  auto reply = runtime::CallHead(
      HeadAddress(),
      [&](proto::Envelope::Builder env) {
        auto req = env.initKv();
        req.setOp(op);
        req.setNamespace(ns);
        req.setKey(key);
        if (value != nullptr) req.setValue(BytesOf(*value));
        req.setOverwrite(overwrite);
        req.setTimeoutMs(static_cast<uint64_t>(std::max<int64_t>(0, wait_timeout.count())));
      },
      // The head answers within the request's own timeout (a Wait's; 0 for
      // the rest); the caller waits Timeouts::parked_reply_margin longer.
      ClampTimeout(wait_timeout) + runtime::CallTimeouts().parked_reply_margin);
  if (!reply.ok()) {
    throw KvError(absl::StrCat("key-value request for '", key, "' failed: ",
                               reply.status().message()));
  }
  Result out;
  absl::Status read = runtime::ReadReply(
      *reply, "the head to a key-value request", [&](proto::Envelope::Reader env) {
        if (!env.isKvResult()) return runtime::UnexpectedReply("the head to a key-value request");
        auto r = env.getKvResult();
        if (r.getCode() != 0) throw KvError(r.getError().cStr());
        out.found = r.getFound();
        out.value = StringOf(r.getValue());
        for (auto k : r.getKeys()) out.keys.emplace_back(k.cStr());
        out.count = r.getCount();
        return absl::OkStatus();
      });
  if (!read.ok()) throw KvError(std::string(read.message()));
  return out;
}

}  // namespace

bool Put(const std::string& key, const std::string& value, const std::string& ns,
         bool overwrite) {
  return Call(proto::KvOp::PUT, ns, key, &value, overwrite).found;
}

std::optional<std::string> Get(const std::string& key, const std::string& ns) {
  Result r = Call(proto::KvOp::GET, ns, key);
  if (!r.found) return std::nullopt;
  return std::move(r.value);
}

bool Exists(const std::string& key, const std::string& ns) {
  return Call(proto::KvOp::EXISTS, ns, key).found;
}

bool Delete(const std::string& key, const std::string& ns) {
  return Call(proto::KvOp::DELETE, ns, key).count > 0;
}

uint64_t DeletePrefix(const std::string& prefix, const std::string& ns) {
  return Call(proto::KvOp::DELETE_PREFIX, ns, prefix).count;
}

std::vector<std::string> Keys(const std::string& prefix, const std::string& ns) {
  return Call(proto::KvOp::KEYS, ns, prefix).keys;
}

bool Wait(const std::string& key, std::chrono::milliseconds timeout, const std::string& ns) {
  return Call(proto::KvOp::WAIT, ns, key, nullptr, true, timeout).found;
}

}  // namespace lumen::kv
