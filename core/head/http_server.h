// HttpServer: a small HTTP/1.1 server (Boost.Beast) on the head's event loop,
// for GET /metrics today and the dashboard's routes later. Each route is an
// exact path with a handler that returns the whole response.
//
//   HttpServer http(io, {.host = "127.0.0.1", .port = 8080, .token = token,
//                        .request_timeout = timeouts.http_request_timeout});
//   http.Route("/metrics", [&](const HttpRequest&) {
//     return HttpResponse{200, "text/plain; version=0.0.4", RenderMetrics(...)};
//   });
//   absl::Status listening = http.Start();   // then http.port()
//
// Security: nothing beyond loopback unless asked; a server on any other
// address refuses to start without a token and answers 401 to a request
// without "Authorization: Bearer <token>". Requests are limited in size
// (16 KiB of headers, no body) and time (`request_timeout` per request).
//
// Only on the thread running `io` (checked in debug builds); handlers run
// there. Borrows `io`, which outlives the server.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <boost/asio.hpp>

#include "absl/status/status.h"
#include "lumen/common/thread_checker.h"

namespace lumen::head {

struct HttpRequest {
  std::string method;  // "GET", ...
  std::string path;    // the target without its query
  std::string query;   // after '?', or ""
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;        // 0: any free port
  std::string token;   // required beyond loopback
  std::chrono::milliseconds request_timeout{10000};
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  HttpServer(boost::asio::io_context& io, HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves GET `path` with `handler` (replacing an earlier one).
  void Route(std::string path, Handler handler);
  // Binds and starts accepting. Errors: the address cannot be bound, or a
  // non-loopback host without a token (FailedPrecondition).
  [[nodiscard]] absl::Status Start();
  // The port it listens on (after Start).
  int port() const { return port_; }
  // Stops accepting; requests in progress finish.
  void Stop();

 private:
  class Session;
  void AcceptNext();
  // The response to one parsed request (routing, method, token).
  HttpResponse Answer(const HttpRequest& request, const std::string& authorization) const;

  ThreadChecker io_thread_;
  boost::asio::io_context& io_;
  HttpServerOptions options_;
  boost::asio::ip::tcp::acceptor acceptor_;
  bool require_token_ = false;
  int port_ = 0;
  std::map<std::string, Handler> routes_;
};

}  // namespace lumen::head
