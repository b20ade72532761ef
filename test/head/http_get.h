// A blocking HTTP GET for tests of the head's HTTP server (/metrics,
// /api/cluster, the dashboard's files).
#pragma once

#include <string>
#include <utility>

namespace lumen::test {

// GET http://host:port/path with an optional Authorization header value; the
// status and body, or status 0 when the request failed (10 s deadline).
std::pair<int, std::string> HttpGet(const std::string& host, int port, const std::string& path,
                                    const std::string& authorization = "");

}  // namespace lumen::test
