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
  auto socket = std::make_shared<tcp::socket>(io_);
  auto timer = std::make_shared<asio::steady_timer>(io_, timeout_);
  timer->async_wait([socket](const boost::system::error_code& e) {
    if (e) return;  // the connect finished first
    boost::system::error_code ignored;
    socket->close(ignored);
  });
  socket->async_connect(
      tcp::endpoint(ip, static_cast<unsigned short>(port)),
      [this, alive = alive_, socket, timer, id, on_gone = std::move(on_gone)](
          const boost::system::error_code& e) {
        timer->cancel();
        boost::system::error_code ignored;
        socket->close(ignored);
        if (!*alive || e != asio::error::connection_refused) return;
        ++refused_;
        LUMEN_LOG(WARNING) << "node " << id.Hex().substr(0, 12)
                           << ": its daemon refuses connections (it is gone)";
        on_gone(id);
      });
}

}  // namespace lumen::head
