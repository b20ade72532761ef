#include "core/head/http_server.h"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lumen/common/address.h"
#include "lumen/common/connection.h"
#include "lumen/common/logging.h"
#include "lumen/common/process.h"

namespace lumen::head {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

constexpr size_t kMaxHeaderBytes = 16 * 1024;

}  // namespace

// One client connection: reads requests one after another (keep-alive), each
// within the request timeout, and writes each answer. Owned by its own async
// operations (shared_from_this); io thread.
class HttpServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpServer& server, asio::ip::tcp::socket socket)
      : server_(server), stream_(std::move(socket)) {}

  void ReadNext() {
    parser_.emplace();
    parser_->header_limit(kMaxHeaderBytes);
    parser_->body_limit(0);
    stream_.expires_after(server_.options_.request_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->OnRead(ec);
                     });
  }

 private:
  void OnRead(beast::error_code ec) {
    if (ec) {
      // The client closed, timed out, or sent something that is not a small
      // HTTP request: drop the connection.
      beast::error_code ignored;
      stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
      return;
    }
    const auto& req = parser_->get();
    HttpRequest request;
    request.method = std::string(req.method_string());
    std::string target(req.target());
    size_t q = target.find('?');
    request.path = target.substr(0, q);
    if (q != std::string::npos) request.query = target.substr(q + 1);
    // An asynchronous route may answer after this returns: the session stays
    // alive through the callback.
    server_.Answer(request, std::string(req[http::field::authorization]),
                   [self = shared_from_this(), version = req.version(),
                    keep_alive = req.keep_alive()](HttpResponse answer) {
                     self->Write(std::move(answer), version, keep_alive);
                   });
  }

  void Write(HttpResponse answer, unsigned version, bool request_keep_alive) {
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(answer.status), version);
    res->set(http::field::server, "lumen");
    res->set(http::field::content_type, answer.content_type);
    res->set(http::field::cache_control, "no-store");
    if (answer.status == 401) res->set(http::field::www_authenticate, "Bearer");
    res->keep_alive(request_keep_alive);
    res->body() = std::move(answer.body);
    res->prepare_payload();
    bool keep_alive = res->keep_alive();
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res, keep_alive](beast::error_code ec, size_t) {
                        if (ec) return;
                        if (keep_alive) {
                          self->ReadNext();
                        } else {
                          beast::error_code ignored;
                          self->stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_send,
                                                          ignored);
                        }
                      });
  }

  HttpServer& server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::empty_body>> parser_;
};

HttpServer::HttpServer(asio::io_context& io, HttpServerOptions options)
    : io_(io), options_(std::move(options)), acceptor_(io) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Route(std::string path, Handler handler, Access access) {
  RouteAsync(
      std::move(path),
      [handler = std::move(handler)](const HttpRequest& request, Respond respond) {
        respond(handler(request));
      },
      access);
}

void HttpServer::RouteAsync(std::string path, AsyncHandler handler, Access access) {
  io_thread_.Check("HttpServer::Route");
  routes_[std::move(path)] = RouteEntry{std::move(handler), access};
}

absl::Status HttpServer::Start() {
  io_thread_.Check("HttpServer::Start");
  require_token_ = !IsLoopbackHost(options_.host);
  if (require_token_ && options_.token.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the HTTP server would listen on ", options_.host, " without a cluster token"));
  }
  boost::system::error_code ec;
  asio::ip::tcp::endpoint endpoint(asio::ip::make_address(options_.host, ec),
                                   static_cast<unsigned short>(options_.port));
  if (!ec) acceptor_.open(endpoint.protocol(), ec);
  if (!ec) SetCloseOnExec(acceptor_.native_handle());
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(64, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", options_.host, ":",
                                               options_.port, ": ", ec.message()));
  }
  port_ = acceptor_.local_endpoint().port();
  AcceptNext();
  return absl::OkStatus();
}

void HttpServer::Stop() {
  boost::system::error_code ignored;
  if (acceptor_.is_open()) acceptor_.close(ignored);
}

void HttpServer::AcceptNext() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, asio::ip::tcp::socket s) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      SetCloseOnExec(s.native_handle());
      std::make_shared<Session>(*this, std::move(s))->ReadNext();
    }
    AcceptNext();
  });
}

void HttpServer::Answer(const HttpRequest& request, const std::string& authorization,
                        Respond respond) const {
  auto route = routes_.find(request.path);
  bool open = route != routes_.end() && route->second.access == Access::kOpen;
  if (require_token_ && !open &&
      !ConstantTimeEquals(authorization, absl::StrCat("Bearer ", options_.token))) {
    respond(HttpResponse{401, "text/plain; charset=utf-8",
                         "this endpoint needs 'Authorization: Bearer <cluster token>'\n"});
    return;
  }
  if (route == routes_.end()) {
    respond(HttpResponse{404, "text/plain; charset=utf-8", "not found\n"});
    return;
  }
  if (request.method != "GET" && request.method != "HEAD") {
    respond(HttpResponse{405, "text/plain; charset=utf-8", "only GET\n"});
    return;
  }
  route->second.handler(request, std::move(respond));
}

}  // namespace lumen::head
