#include "core/node/client_registry.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "absl/strings/str_cat.h"
#include "lumen/common/head_client.h"
#include "lumen/common/post.h"
#include "lumen/objectstore/fd_passing.h"

namespace lumen::node {

ClientRegistry::ClientRegistry(boost::asio::io_context& io, ClientRegistryOptions options)
    : io_(io), options_(options) {}

std::shared_ptr<Connection> ClientRegistry::Admit(Socket socket) {
  io_thread_.Check("ClientRegistry");
  bool local = socket.local_endpoint().protocol().family() == AF_UNIX;
  auto conn = (local ? local_admission_ : admission_).Admit(std::move(socket));
  if (!conn) return nullptr;
  conn->context() = Client{};
  clients_[conn->id()] = conn;
  return conn;
}

absl::Status ClientRegistry::CheckHello(proto::Hello::Reader hello) const {
  if (hello.getProtocolVersion() != proto::PROTOCOL_VERSION) {
    return absl::FailedPreconditionError(
        absl::StrCat("protocol version ", hello.getProtocolVersion(),
                     " is not supported (node speaks ", proto::PROTOCOL_VERSION, ")"));
  }
  if (options_.require_token &&
      !ConstantTimeEquals(std::string_view(hello.getToken().cStr(), hello.getToken().size()),
                          runtime::HeadToken())) {
    return absl::PermissionDeniedError(hello.getToken().size() == 0
                                           ? "connection without the cluster token"
                                           : "connection with a wrong cluster token");
  }
  return absl::OkStatus();
}

absl::Status ClientRegistry::SendWithFdNow(Connection& conn, const std::string& frame, int fd) {
  auto sent = objectstore::TrySendWithFd(conn.socket().native_handle(), frame.data(),
                                         frame.size(), fd);
  if (!sent.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot send the hello reply: ", sent.status().message()));
  }
  // The fd went with the first byte; the rest, if any, takes the ordinary path.
  if (*sent < frame.size()) conn.SendFramed(std::string_view(frame).substr(*sent));
  return absl::OkStatus();
}

Connection* ClientRegistry::Find(uint64_t id) {
  io_thread_.Check("ClientRegistry");
  auto it = clients_.find(id);
  if (it == clients_.end() || it->second->closed()) return nullptr;
  return it->second.get();
}

void ClientRegistry::Send(uint64_t id, capnp::MessageBuilder& message) {
  if (Connection* conn = Find(id)) conn->Send(message);
}

void ClientRegistry::Remove(uint64_t id) {
  io_thread_.Check("ClientRegistry");
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  lumen::ReleaseLater(io_, "node.release_closed_client", std::move(it->second));
  clients_.erase(it);
}

void ClientRegistry::ForEachLocalProcess(const std::function<void(Connection&)>& fn) {
  io_thread_.Check("ClientRegistry");
  for (const auto& [id, conn] : clients_) {
    const Client& c = Info(*conn);
    if (!c.hello_done || conn->closed() || !c.local()) continue;
    fn(*conn);
  }
}

}  // namespace lumen::node
