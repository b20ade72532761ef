// The head's HTTP server on its own (no cluster): a route that answers later
// (RouteAsync, as /api/cluster does after asking the nodes), and the token
// rule beyond loopback with open routes (the dashboard's static files).
#include "core/head/http_server.h"

#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "test/head/http_get.h"

namespace lumen::head {
namespace {


// Invariant: an asynchronous route's answer reaches the client when the
// handler responds, after the handler itself has returned.
TEST_CASE("an asynchronous route answers when its handler responds") {
  boost::asio::io_context io;
  HttpServer server(io, {.host = "127.0.0.1", .port = 0});
  boost::asio::steady_timer later(io);
  bool handler_returned = false;
  server.RouteAsync("/later", [&](const HttpRequest& request, HttpServer::Respond respond) {
    later.expires_after(std::chrono::milliseconds(50));
    later.async_wait([&, respond, query = request.query](const boost::system::error_code&) {
      respond(HttpResponse{200, "application/json",
                           std::string(handler_returned ? "after" : "inside") + " " + query});
    });
    handler_returned = true;
  });
  REQUIRE(server.Start().ok());
  auto work = boost::asio::make_work_guard(io);
  std::thread loop([&] { io.run(); });
  auto answer = test::HttpGet("127.0.0.1", server.port(), "/later?x=1");
  work.reset();
  io.stop();
  loop.join();
  CHECK(answer.first == 200);
  CHECK(answer.second == "after x=1");
}

// Invariant: beyond loopback an open route is served to anyone, every other
// route (and an unknown path) only with the cluster token.
TEST_CASE("beyond loopback, open routes need no token and the others do") {
  boost::asio::io_context io;
  HttpServer server(io, {.host = "0.0.0.0", .port = 0, .token = "sesame"});
  server.Route("/", [](const HttpRequest&) { return HttpResponse{200, "text/html", "page"}; },
               HttpServer::Access::kOpen);
  server.RouteAsync("/api/cluster", [](const HttpRequest&, HttpServer::Respond respond) {
    respond(HttpResponse{200, "application/json", "{}"});
  });
  REQUIRE(server.Start().ok());
  std::thread loop([&] { io.run(); });
  auto page = test::HttpGet("127.0.0.1", server.port(), "/");
  auto api_bare = test::HttpGet("127.0.0.1", server.port(), "/api/cluster");
  auto api_wrong = test::HttpGet("127.0.0.1", server.port(), "/api/cluster", "Bearer nope");
  auto api_right = test::HttpGet("127.0.0.1", server.port(), "/api/cluster", "Bearer sesame");
  auto unknown_bare = test::HttpGet("127.0.0.1", server.port(), "/elsewhere");
  auto unknown_right = test::HttpGet("127.0.0.1", server.port(), "/elsewhere", "Bearer sesame");
  io.stop();
  loop.join();
  CHECK(page.first == 200);
  CHECK(page.second == "page");
  CHECK(api_bare.first == 401);
  CHECK(api_wrong.first == 401);
  CHECK(api_right.first == 200);
  CHECK(api_right.second == "{}");
  CHECK(unknown_bare.first == 401);
  CHECK(unknown_right.first == 404);
}

}  // namespace
}  // namespace lumen::head
