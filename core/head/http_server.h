// HttpServer: a small HTTP/1.1 server (Boost.Beast) on the head's event loop,
// for GET /metrics and the dashboard's routes. Each route is an exact path
// with a handler that returns the whole response, or (RouteAsync) one that
// answers later through a callback, e.g. after asking the nodes.
//
//   HttpServer http(io, {.host = "127.0.0.1", .port = 8080, .token = token,
//                        .request_timeout = timeouts.http_request_timeout});
//   http.Route("/metrics", [&](const HttpRequest&) {
//     return HttpResponse{200, "text/plain; version=0.0.4", RenderMetrics(...)};
//   });
//   http.RouteAsync("/api/cluster", [&](const HttpRequest&, HttpServer::Respond respond) {
//     gatherer.Gather([respond](Snapshot s) { respond(HttpResponse{200, ..., Render(s)}); });
//   });
//   absl::Status listening = http.Start();   // then http.port()
//
// Security: nothing beyond loopback unless asked; a server on any other
// address refuses to start without a token and answers 401 to a request
// without "Authorization: Bearer <token>", except on routes registered with
// Access::kOpen (static files that hold no cluster data, such as the
// dashboard's page, which then sends the token itself). Requests are limited
// in size (16 KiB of headers, no body) and time (`request_timeout` per request).
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
  // Answers the request; call it once, on the io thread (later is fine: the
  // connection waits, within its request timeout).
  using Respond = std::function<void(HttpResponse)>;
  using AsyncHandler = std::function<void(const HttpRequest&, Respond)>;
  // Who may GET a route beyond loopback.
  enum class Access {
    kToken,  // only requests with the cluster token (all routes on loopback)
    kOpen,   // anyone: for static files with no cluster data
  };

  HttpServer(boost::asio::io_context& io, HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves GET `path` with `handler` (replacing an earlier one).
  void Route(std::string path, Handler handler, Access access = Access::kToken);
  // Serves GET `path` with `handler`, which answers through its Respond.
  void RouteAsync(std::string path, AsyncHandler handler, Access access = Access::kToken);
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
  struct RouteEntry {
    AsyncHandler handler;
    Access access = Access::kToken;
  };
  // Answers one parsed request (routing, method, token) through `respond`.
  void Answer(const HttpRequest& request, const std::string& authorization, Respond respond) const;

  ThreadChecker io_thread_;
  boost::asio::io_context& io_;
  HttpServerOptions options_;
  boost::asio::ip::tcp::acceptor acceptor_;
  bool require_token_ = false;
  int port_ = 0;
  std::map<std::string, RouteEntry> routes_;
};

}  // namespace lumen::head
