// Linux network namespaces for tests that need more than loopback: a bridge in
// this namespace and `count` namespaces, each joined to it by a veth pair, all
// on one /24. Needs root and `ip netns`; ok() says whether it was made.
//
//   lumen::test::BridgedNamespaces net(2, "10.77.0");  // bridge 10.77.0.1
//   net.Exec(0, "lumen start ...");                   // runs at 10.77.0.2
//   net.SetLinkUp(1, false);                          // cut 10.77.0.3 off
//
// Everything (namespaces, veths, bridge) is removed at scope exit. Names carry
// this process's pid so concurrent test binaries do not collide; two binaries
// given the same subnet at once would (pick one subnet per test).
// Not thread-safe: use from the test's thread.
#pragma once

#include <string>

namespace lumen::test {

class BridgedNamespaces {
 public:
  // `subnet` is the first three octets ("10.77.0"): the bridge (this
  // namespace) is .1, namespace i is .(i + 2).
  BridgedNamespaces(int count, std::string subnet);
  ~BridgedNamespaces();
  BridgedNamespaces(const BridgedNamespaces&) = delete;
  BridgedNamespaces& operator=(const BridgedNamespaces&) = delete;

  // Whether every namespace and link was made; else error() says which step failed.
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  std::string host_ip() const { return subnet_ + ".1"; }
  std::string ip(int i) const { return subnet_ + "." + std::to_string(i + 2); }
  // `command` run inside namespace i (through `ip netns exec`), for RunCommand.
  std::string Exec(int i, const std::string& command) const;
  // Takes namespace i's link down at the bridge (a partition: packets either
  // way are dropped, sockets see no error) or up again. Returns success.
  bool SetLinkUp(int i, bool up);

 private:
  bool Run(const std::string& command);
  std::string Namespace(int i) const;
  std::string HostEnd(int i) const;
  std::string FarEnd(int i) const;

  int count_;
  std::string subnet_, tag_, bridge_;
  int made_ = 0;  // namespaces created (each removed at exit)
  bool ok_ = false;
  std::string error_;
};

}  // namespace lumen::test
