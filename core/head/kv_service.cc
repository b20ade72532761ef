#include "core/head/kv_service.h"

#include <chrono>
#include <limits>
#include <string>
#include <vector>

#include "core/head/head_replies.h"
#include "lumen/common/timeouts.h"

namespace lumen::head {

KvService::KvService(Options options) : options_(std::move(options)), store_(options_.limits) {}

bool KvService::Handle(Connection& conn, proto::Envelope::Reader msg) {
  thread_.Check("KvService");
  switch (msg.which()) {
    case proto::Envelope::KV:
      OnKv(conn, msg.getRequestId(), msg.getKv());
      return true;
    case proto::Envelope::KV_PUT: {
      // Older form of a put: the default namespace, overwriting.
      auto kv = msg.getKvPut();
      auto put = store_.Put("", kv.getKey().cStr(), StringOf(kv.getValue()), true);
      if (!put.ok()) {
        SendError(conn, msg.getRequestId(), put.status());
        return true;
      }
      RecordPut("", kv.getKey().cStr());
      AnswerWaiters(put->woken);
      SendAck(conn, msg.getRequestId());
      return true;
    }
    case proto::Envelope::KV_GET: {
      const std::string* value = store_.Get("", msg.getKvGet().cStr());
      SendReply(conn, msg.getRequestId(), [&](proto::Envelope::Builder env) {
        auto reply = env.initKvReply();
        reply.setKey(msg.getKvGet());
        reply.setFound(value != nullptr);
        if (value != nullptr) reply.setValue(BytesOf(*value));
      });
      return true;
    }
    default:
      return false;
  }
}

void KvService::DropConnection(uint64_t conn_id) {
  thread_.Check("KvService");
  for (const auto& w : store_.DropConnection(conn_id)) timers_.erase({w.conn, w.request});
}

// One request, answered at once except a wait on an absent key, which is
// parked until the key is put, its timeout passes or its connection closes.
void KvService::OnKv(Connection& conn, uint64_t request_id, proto::KvRequest::Reader req) {
  std::string ns = req.getNamespace().cStr();
  std::string key = req.getKey().cStr();
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(request_id);
  auto result = env.initKvResult();
  switch (req.getOp()) {
    case proto::KvOp::PUT: {
      auto put = store_.Put(ns, key, StringOf(req.getValue()), req.getOverwrite());
      if (!put.ok()) return SendError(conn, request_id, put.status());
      if (put->written) RecordPut(ns, key);
      result.setFound(put->written);
      conn.Send(out.builder());
      AnswerWaiters(put->woken);
      return;
    }
    case proto::KvOp::GET:
    case proto::KvOp::EXISTS: {
      if (auto s = store_.CheckKey(ns, key); !s.ok()) return SendError(conn, request_id, s);
      const std::string* value = store_.Get(ns, key);
      result.setFound(value != nullptr);
      if (value != nullptr && req.getOp() == proto::KvOp::GET) result.setValue(BytesOf(*value));
      break;
    }
    case proto::KvOp::DELETE: {
      uint64_t count = store_.Delete(ns, key);
      if (count > 0) RecordDelete(ns, key);
      result.setCount(count);
      break;
    }
    case proto::KvOp::DELETE_PREFIX: {
      std::vector<std::string> gone;
      if (options_.recorder != nullptr && options_.recorder->enabled()) {
        gone = store_.Keys(ns, key, std::numeric_limits<size_t>::max());
      }
      result.setCount(store_.DeletePrefix(ns, key));
      for (const std::string& k : gone) RecordDelete(ns, k);
      break;
    }
    case proto::KvOp::KEYS: {
      auto keys = store_.Keys(ns, key, kMaxKeysPerReply);
      auto list = result.initKeys(keys.size());
      for (size_t i = 0; i < keys.size(); ++i) list.set(i, keys[i]);
      break;
    }
    case proto::KvOp::WAIT: {
      KvStore::Waiter waiter{conn.id(), request_id};
      auto present = store_.AddWaiter(ns, key, waiter);
      if (!present.ok()) return SendError(conn, request_id, present.status());
      if (*present || req.getTimeoutMs() == 0) {
        if (!*present) store_.RemoveWaiter(waiter);
        result.setFound(*present);
        break;
      }
      auto timer = std::make_unique<boost::asio::steady_timer>(
          *options_.io,
          CappedWireTimeout(req.getTimeoutMs(), options_.max_wait));
      timer->async_wait([this, waiter](const boost::system::error_code& ec) {
        if (ec) return;  // answered or dropped: the timer was destroyed
        timers_.erase({waiter.conn, waiter.request});
        if (!store_.RemoveWaiter(waiter)) return;
        AnswerWaiter(waiter, false);
      });
      timers_[{waiter.conn, waiter.request}] = std::move(timer);
      return;  // parked
    }
    default:
      return SendError(conn, request_id, absl::InvalidArgumentError("unknown key-value operation"));
  }
  conn.Send(out.builder());
}

bool KvService::Restore(const std::string& ns, const std::string& key, std::string value) {
  thread_.Check("KvService");
  return store_.Put(ns, key, std::move(value), /*overwrite=*/true).ok();
}

void KvService::RecordPut(const std::string& ns, const std::string& key) {
  if (options_.recorder == nullptr) return;
  const std::string* value = store_.Get(ns, key);
  if (value != nullptr) {
    options_.recorder->Put(HeadTable::kKv, HeadStateRecorder::JoinKey(ns, key), *value);
  }
}

void KvService::RecordDelete(const std::string& ns, const std::string& key) {
  if (options_.recorder == nullptr) return;
  options_.recorder->Delete(HeadTable::kKv, HeadStateRecorder::JoinKey(ns, key));
}

void KvService::AnswerWaiters(const std::vector<KvStore::Waiter>& woken) {
  for (const auto& w : woken) {
    timers_.erase({w.conn, w.request});
    AnswerWaiter(w, true);
  }
}

void KvService::AnswerWaiter(const KvStore::Waiter& w, bool found) {
  Connection* conn = options_.find_connection(w.conn);
  if (conn == nullptr) return;
  SendReply(*conn, w.request,
            [&](proto::Envelope::Builder env) { env.initKvResult().setFound(found); });
}

void KvService::SendError(Connection& conn, uint64_t request_id, const absl::Status& status) {
  SendReply(conn, request_id, [&](proto::Envelope::Builder env) {
    auto result = env.initKvResult();
    result.setCode(static_cast<uint32_t>(status.code()));
    result.setError(std::string(status.message()));
  });
}

}  // namespace lumen::head
