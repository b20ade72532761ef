#include "core/node/keyed_requests.h"

#include <capnp/serialize.h>

#include "lumen/common/control_retry.h"

namespace lumen::node {

size_t KeyedRequests::size() const {
  size_t n = 0;
  for (const auto& [id, client] : clients_) n += client.entries.size();
  return n;
}

bool KeyedRequests::Known(proto::Envelope::Reader msg) const {
  auto key = RetryKeyOf(msg);
  if (!key.has_value()) return false;
  auto client = clients_.find(key->client);
  return client != clients_.end() && client->second.entries.contains(key->request);
}

bool KeyedRequests::Repeat(Connection& conn, proto::Envelope::Reader msg, bool bound) {
  thread_.Check("KeyedRequests");
  auto key = RetryKeyOf(msg);
  if (!key.has_value()) return false;
  const uint64_t request_id = msg.getRequestId();
  auto client = clients_.find(key->client);
  if (client != clients_.end()) {
    client->second.last_used = ++clock_;
    auto it = client->second.entries.find(key->request);
    if (it != client->second.entries.end()) {
      Entry& entry = it->second;
      auto origin = entry.origin.lock();
      const bool same_connection = entry.origin_conn == conn.id();
      if (entry.bound && !same_connection && (!origin || origin->closed())) {
        // What the first got (a lease) ended with its connection: act anew.
        Forget(client->second, key->request);
      } else {
        ++replayed_;
        if (entry.answered) {
          Replay(conn, entry.reply, request_id);
        } else if (!same_connection || entry.origin_request != request_id) {
          entry.waiters.emplace_back(conn.weak_from_this(), request_id);
        }  // else: the first's own reply will answer it
        return true;
      }
    }
  }
  Remember({key->client, key->request}, conn, request_id, bound);
  return false;
}

void KeyedRequests::Remember(const Key& key, Connection& conn, uint64_t request_id, bool bound) {
  if (!clients_.contains(key.first) && clients_.size() >= limits_.clients) {
    // Forget the client heard from least recently.
    auto oldest = clients_.begin();
    for (auto it = clients_.begin(); it != clients_.end(); ++it) {
      if (it->second.last_used < oldest->second.last_used) oldest = it;
    }
    while (!oldest->second.order.empty()) Forget(oldest->second, oldest->second.order.front());
    clients_.erase(oldest);
  }
  Client& client = clients_[key.first];
  client.last_used = ++clock_;
  Entry& entry = client.entries[key.second];
  entry.bound = bound;
  entry.origin = conn.weak_from_this();
  entry.origin_conn = conn.id();
  entry.origin_request = request_id;
  client.order.push_back(key.second);
  unanswered_[{conn.id(), request_id}] = key;
  while (client.order.size() > limits_.per_client) Forget(client, client.order.front());
}

void KeyedRequests::Forget(Client& client, uint64_t request) {
  auto it = client.entries.find(request);
  if (it != client.entries.end()) {
    if (!it->second.answered) {
      unanswered_.erase(ConnRequest{it->second.origin_conn, it->second.origin_request});
    }
    client.entries.erase(it);
  }
  // `order` keeps the number; a stale one is skipped when it reaches the front.
  while (!client.order.empty() && !client.entries.contains(client.order.front())) {
    client.order.pop_front();
  }
}

void KeyedRequests::OnReply(uint64_t conn_id, uint64_t request_id, capnp::MessageBuilder& reply) {
  thread_.Check("KeyedRequests");
  if (unanswered_.empty()) return;
  auto pending = unanswered_.find(ConnRequest{conn_id, request_id});
  if (pending == unanswered_.end()) return;
  Key key = pending->second;
  unanswered_.erase(pending);
  auto client = clients_.find(key.first);
  if (client == clients_.end()) return;
  auto it = client->second.entries.find(key.second);
  if (it == client->second.entries.end() || it->second.answered) return;
  Entry& entry = it->second;
  entry.answered = true;
  entry.reply = capnp::messageToFlatArray(reply);
  auto waiters = std::move(entry.waiters);
  entry.waiters.clear();
  for (auto& [weak, repeat_id] : waiters) {
    if (auto conn = weak.lock(); conn && !conn->closed()) Replay(*conn, entry.reply, repeat_id);
  }
}

void KeyedRequests::Replay(Connection& conn, const kj::Array<capnp::word>& reply,
                           uint64_t request_id) {
  // The stored reply with the repeat's request id.
  capnp::FlatArrayMessageReader reader(reply.asPtr());
  capnp::MallocMessageBuilder out;
  out.setRoot(reader.getRoot<proto::Envelope>());
  out.getRoot<proto::Envelope>().setRequestId(request_id);
  conn.Send(out);
}

}  // namespace lumen::node
