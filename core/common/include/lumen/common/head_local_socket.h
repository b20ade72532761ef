// The head's local listener: a head bound to a loopback address (an embedded
// cluster's 127.0.0.1:PORT, `lumen start --head` by default) also listens on
// an abstract Unix socket named after that address, and the processes of the
// same host that would reach it over loopback TCP (CallHead's pooled
// connections, the node daemon's head link) connect there first: the same
// frames, the same hello and token rules, but a round trip on a Unix stream
// costs both sides ~30 % less CPU than one over loopback TCP on the 2-vCPU
// benchmark machine (doc/benchmark.md, "Placement groups"). Abstract names
// live in the network namespace, as loopback addresses do, so a client that
// could reach the head at 127.0.0.1:PORT reaches it here; a client that finds
// no such socket (another head version, a proxy on that port, a head bound
// beyond loopback) connects over TCP as before.
//
//   std::string name = HeadLocalSocketName("127.0.0.1:6379");  // "@lumen-head-127.0.0.1:6379"
//   HeadLocalSocketName("10.0.0.5:6379");                      // "": TCP only
//
// Abstract names have no owner and no permissions: any local user could bind
// the name first (or while the head restarts) and collect the hellos, tokens
// included. So a client uses a local connection only when its peer runs as
// the same user (SO_PEERCRED, HeadLocalPeerTrusted); otherwise it closes it
// and connects over TCP, where no one else can hold the head's port while the
// head listens on it.
//
// LUMEN_HEAD_LOCAL_SOCKET=0 in a client's environment makes it use TCP only
// (the head listens regardless).
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "lumen/common/address.h"

namespace lumen {

// The abstract socket (with UnixEndpoint's leading '@') of the head at
// `head_address` ("HOST:PORT"); "" when HOST is not a loopback address.
inline std::string HeadLocalSocketName(const std::string& head_address) {
  auto colon = head_address.rfind(':');
  if (colon == std::string::npos || colon == 0) return "";
  if (!IsLoopbackHost(head_address.substr(0, colon))) return "";
  return "@lumen-head-" + head_address;
}

// The name a client should try first for `head_address`, or "" (TCP only).
inline std::string HeadLocalSocketToTry(const std::string& head_address) {
  const char* off = std::getenv("LUMEN_HEAD_LOCAL_SOCKET");
  if (off != nullptr && std::strcmp(off, "0") == 0) return "";
  return HeadLocalSocketName(head_address);
}

// True when the process at the other end of the connected Unix socket `fd`
// runs as this process's effective user (its credentials when it listened).
inline bool HeadLocalPeerTrusted(int fd) {
  ucred peer{};
  socklen_t size = sizeof(peer);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 || size != sizeof(peer)) {
    return false;
  }
  return peer.uid == ::geteuid();
}

}  // namespace lumen
