// Unix socket names of the two kinds an address may carry (address.h):
// "/path" (a file) and "@/path" (the abstract name "\0/path": no file,
// gone with the socket).
#pragma once

#include <string>

#include <boost/asio/local/stream_protocol.hpp>

namespace lumen {

// The asio endpoint of a Unix address part.
boost::asio::local::stream_protocol::endpoint UnixEndpoint(const std::string& unix_path);
// Whether `unix_path` names a socket of the session at `session_dir` (this
// node's): it lies under it, abstract or not.
bool InSessionDir(const std::string& unix_path, const std::string& session_dir);

}  // namespace lumen
