#include "core/head/node_probe.h"

#include "lumen/common/address.h"
#include "lumen/common/logging.h"

namespace lumen::head {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

void NodeProbe::Probe(const NodeId& id, const std::string& address,
                      std::function<void(const NodeId&)> on_gone) {
  const std::string hostport = ParseAddress(address).tcp;
  const auto colon = hostport.rfind(':');
  if (colon == std::string::npos) return;
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(hostport.substr(0, colon), ec);
  if (ec) return;  // a host name: not resolved here (the grace decides)
  unsigned long port = 0;
  try {
    port = std::stoul(hostport.substr(colon + 1));
  } catch (const std::exception&) {
    return;
  }
  if (port == 0 || port > 65535) return;
  ++probes_;
  // One attempt, bounded by `timeout_` in all: the connect, then a read. A
  // daemon that is dying may still have its listening socket for a moment:
  // the kernel then completes the connect from its backlog and resets it
  // when the socket closes; a living daemon sends nothing (it waits for a
  // hello), so the read runs into the timeout.
  auto socket = std::make_shared<tcp::socket>(io_);
  auto timer = std::make_shared<asio::steady_timer>(io_, timeout_);
  timer->async_wait([socket](const boost::system::error_code& e) {
    if (e) return;  // finished first
    boost::system::error_code ignored;
    socket->close(ignored);
  });
  auto gone = [this, alive = alive_, id, on_gone = std::move(on_gone)]() {
    if (!*alive) return;
    ++refused_;
    LUMEN_LOG(WARNING) << "node " << id.Hex().substr(0, 12)
                       << ": its daemon is gone (its address refuses or resets connections)";
    on_gone(id);
  };
  socket->async_connect(
      tcp::endpoint(ip, static_cast<unsigned short>(port)),
      [alive = alive_, socket, timer, gone](const boost::system::error_code& e) {
        if (!*alive) return;
        if (e) {
          timer->cancel();
          boost::system::error_code ignored;
          socket->close(ignored);
          if (e == asio::error::connection_refused) gone();
          return;
        }
        auto byte = std::make_shared<char>();
        socket->async_read_some(
            asio::buffer(byte.get(), 1),
            [alive, socket, timer, gone, byte](const boost::system::error_code& e, size_t) {
              timer->cancel();
              boost::system::error_code ignored;
              socket->close(ignored);
              // Only a reset says gone; an orderly close (a living daemon
              // refusing us, say) or the timeout says nothing.
              if (*alive && e == asio::error::connection_reset) gone();
            });
      });
}

}  // namespace lumen::head
