#include "core/head/request_deduplicator.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>

#include "lumen/common/control_retry.h"
#include "lumen/common/logging.h"

namespace lumen::head {

RequestDeduplicator::RequestDeduplicator() : RequestDeduplicator(Limits{}) {}

RequestDeduplicator::RequestDeduplicator(Limits limits) : table_(std::make_shared<Table>()) {
  table_->limits = limits;
}

size_t RequestDeduplicator::size() const {
  size_t n = 0;
  for (const auto& [id, client] : table_->clients) n += client.entries.size();
  return n;
}

bool RequestDeduplicator::Repeat(Connection& conn, proto::Envelope::Reader request) {
  thread_.Check("RequestDeduplicator");
  auto key = RetryKeyOf(request);
  if (!key.has_value()) return false;
  Table& table = *table_;
  auto client = table.clients.find(key->client);
  if (client != table.clients.end()) {
    client->second.last_used = ++table.clock;
    auto entry = client->second.entries.find(key->request);
    if (entry != client->second.entries.end()) {
      ++table.replayed;
      if (entry->second.answered) {
        SendReplay(conn, entry->second.reply, request.getRequestId());
      } else {
        entry->second.waiters.emplace_back(conn.weak_from_this(), request.getRequestId());
      }
      return true;
    }
  }
  Remember(key->client, key->request);
  // The first frame sent on `conn` from now on is this request's reply (the
  // clients that set keys send one request per connection).
  std::weak_ptr<Table> weak = table_;
  conn.set_send_tap([weak, client_id = key->client, request_id = key->request,
                     done = false](std::string_view frames) mutable {
    if (done) return;
    done = true;
    if (auto table = weak.lock()) Answer(*table, client_id, request_id, frames);
  });
  return false;
}

void RequestDeduplicator::Remember(uint64_t client_id, uint64_t request) {
  Table& table = *table_;
  if (!table.clients.contains(client_id) && table.clients.size() >= table.limits.clients) {
    // Forget the client heard from least recently.
    auto oldest = table.clients.begin();
    for (auto it = table.clients.begin(); it != table.clients.end(); ++it) {
      if (it->second.last_used < oldest->second.last_used) oldest = it;
    }
    table.clients.erase(oldest);
  }
  Client& client = table.clients[client_id];
  client.last_used = ++table.clock;
  client.entries[request];
  client.order.push_back(request);
  while (client.order.size() > table.limits.per_client) {
    client.entries.erase(client.order.front());
    client.order.pop_front();
  }
}

void RequestDeduplicator::Answer(Table& table, uint64_t client_id, uint64_t request,
                                 std::string_view frames) {
  auto client = table.clients.find(client_id);
  if (client == table.clients.end()) return;
  auto entry = client->second.entries.find(request);
  if (entry == client->second.entries.end() || entry->second.answered) return;
  // Keep the first frame only.
  if (frames.size() < kFrameHeaderBytes) return;
  auto length = ParseFrameHeader(reinterpret_cast<const uint8_t*>(frames.data()), 64u << 20);
  if (!length.ok() || frames.size() < kFrameHeaderBytes + *length) return;
  entry->second.answered = true;
  entry->second.reply.assign(frames.substr(0, kFrameHeaderBytes + *length));
  auto waiters = std::move(entry->second.waiters);
  entry->second.waiters.clear();
  for (auto& [weak, request_id] : waiters) {
    if (auto conn = weak.lock()) SendReplay(*conn, entry->second.reply, request_id);
  }
}

void RequestDeduplicator::SendReplay(Connection& conn, const std::string& reply,
                                     uint64_t request_id) {
  // The stored frame with the repeat's request id.
  const size_t words = (reply.size() - kFrameHeaderBytes) / sizeof(capnp::word);
  kj::Array<capnp::word> payload = kj::heapArray<capnp::word>(words);
  std::memcpy(payload.begin(), reply.data() + kFrameHeaderBytes, words * sizeof(capnp::word));
  capnp::FlatArrayMessageReader reader(payload);
  capnp::MallocMessageBuilder out;
  out.setRoot(reader.getRoot<proto::Envelope>());
  out.getRoot<proto::Envelope>().setRequestId(request_id);
  conn.Send(out);
}

}  // namespace lumen::head
