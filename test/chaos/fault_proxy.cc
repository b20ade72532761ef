#include "test/chaos/fault_proxy.h"

#include <future>
#include <random>
#include <vector>

namespace lumen::test::chaos {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct ProxyRandom {
  std::mt19937_64 engine;
};

// One forwarded connection: the accepted socket and the one to the target,
// pumped in both directions; reset (both closed with RST) on a drawn fault or
// when either side ends.
struct FaultProxy::Link : std::enable_shared_from_this<FaultProxy::Link> {
  Link(FaultProxy& proxy, tcp::socket client)
      : proxy(proxy), client(std::move(client)), server(proxy.io_) {}

  FaultProxy& proxy;
  tcp::socket client, server;
  bool closed = false;

  void Start() {
    auto colon = proxy.options_.target.rfind(':');
    tcp::endpoint to(asio::ip::make_address(proxy.options_.target.substr(0, colon)),
                     static_cast<unsigned short>(std::stoi(proxy.options_.target.substr(colon + 1))));
    server.async_connect(to, [self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec) return self->Close(false);
      boost::system::error_code ignored;
      self->server.set_option(tcp::no_delay(true), ignored);
      self->client.set_option(tcp::no_delay(true), ignored);
      self->Pump(self->client, self->server);
      self->Pump(self->server, self->client);
    });
  }

  // Reads a chunk from `from`, delays it, maybe resets, writes it to `to`, repeats.
  void Pump(tcp::socket& from, tcp::socket& to) {
    auto buffer = std::make_shared<std::vector<uint8_t>>(16 << 10);
    from.async_read_some(asio::buffer(*buffer), [self = shared_from_this(), &from, &to, buffer](
                                                    const boost::system::error_code& ec, size_t n) {
      if (ec || self->closed) return self->Close(false);
      buffer->resize(n);
      self->proxy.chunks_.fetch_add(1);
      if (&from == &self->server && self->proxy.drop_from_target_.load()) {
        self->proxy.dropped_.fetch_add(1);
        return self->Pump(from, to);  // lost on the way
      }
      auto& rng = self->proxy.random_->engine;
      const bool reset = self->proxy.resets_on_.load() &&
                         std::uniform_real_distribution<double>(0, 1)(rng) <
                             self->proxy.options_.reset_probability;
      auto delay = std::chrono::milliseconds(std::uniform_int_distribution<int64_t>(
          0, self->proxy.options_.max_delay.count())(rng));
      auto timer = std::make_shared<asio::steady_timer>(self->proxy.io_, delay);
      timer->async_wait([self, &from, &to, buffer, reset, timer](const boost::system::error_code& ec) {
        if (ec || self->closed) return;
        if (reset) return self->Close(true);
        self->Write(from, to, buffer, 0);
      });
    });
  }

  void Write(tcp::socket& from, tcp::socket& to, std::shared_ptr<std::vector<uint8_t>> buffer,
             size_t offset) {
    if (offset == buffer->size()) return Pump(from, to);
    size_t n = proxy.options_.split_writes ? 1 : buffer->size() - offset;
    asio::async_write(to, asio::buffer(buffer->data() + offset, n),
                      [self = shared_from_this(), &from, &to, buffer, offset, n](
                          const boost::system::error_code& ec, size_t) {
                        if (ec || self->closed) return self->Close(false);
                        self->Write(from, to, buffer, offset + n);
                      });
  }

  // With `reset`, both peers get an RST (SO_LINGER 0) rather than an orderly close.
  void Close(bool reset) {
    if (closed) return;
    closed = true;
    boost::system::error_code ignored;
    if (reset) {
      proxy.resets_.fetch_add(1);
      client.set_option(asio::socket_base::linger(true, 0), ignored);
      server.set_option(asio::socket_base::linger(true, 0), ignored);
    } else {
      // Pass the end on: what was written still arrives.
      client.shutdown(tcp::socket::shutdown_both, ignored);
      server.shutdown(tcp::socket::shutdown_both, ignored);
    }
    client.close(ignored);
    server.close(ignored);
  }
};

FaultProxy::FaultProxy(Options options)
    : options_(std::move(options)), acceptor_(io_), random_(std::make_shared<ProxyRandom>()) {
  random_->engine.seed(options_.seed);
  tcp::endpoint endpoint(asio::ip::make_address(options_.listen_host), 0);
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(asio::socket_base::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen();
  address_ = options_.listen_host + ":" + std::to_string(acceptor_.local_endpoint().port());
  Accept();
  thread_ = std::thread([this] { io_.run(); });
}

FaultProxy::~FaultProxy() {
  asio::post(io_, [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
  });
  io_.stop();
  thread_.join();
}

void FaultProxy::ResetAll() {
  std::promise<void> done;
  asio::post(io_, [this, &done] {
    for (const std::weak_ptr<Link>& weak : links_) {
      if (auto link = weak.lock()) link->Close(true);
    }
    done.set_value();
  });
  done.get_future().wait();
}

void FaultProxy::Accept() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (ec) return;
    connections_.fetch_add(1);
    auto link = std::make_shared<Link>(*this, std::move(socket));
    std::erase_if(links_, [](const std::weak_ptr<Link>& l) { return l.expired(); });
    links_.push_back(link);
    link->Start();
    Accept();
  });
}

}  // namespace lumen::test::chaos
