#include "test/head/http_get.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <exception>

namespace lumen::test {

std::pair<int, std::string> HttpGet(const std::string& host, int port, const std::string& path,
                                    const std::string& authorization) {
  namespace http = boost::beast::http;
  try {
    boost::asio::io_context io;
    boost::beast::tcp_stream stream(io);
    stream.expires_after(std::chrono::seconds(10));
    stream.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address(host),
                                                  static_cast<unsigned short>(port)));
    http::request<http::empty_body> req(http::verb::get, path, 11);
    req.set(http::field::host, host);
    if (!authorization.empty()) req.set(http::field::authorization, authorization);
    http::write(stream, req);
    boost::beast::flat_buffer buffer;
    http::response<http::string_body> res;
    http::read(stream, buffer, res);
    return {static_cast<int>(res.result_int()), res.body()};
  } catch (const std::exception&) {
    return {0, ""};
  }
}

}  // namespace lumen::test
