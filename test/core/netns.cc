#include "test/core/netns.h"

#include <unistd.h>

#include "test/core/test_support.h"

namespace lumen::test {

BridgedNamespaces::BridgedNamespaces(int count, std::string subnet)
    : count_(count), subnet_(std::move(subnet)), tag_(std::to_string(::getpid() % 100000)),
      bridge_("lmb" + tag_) {
  // Interface names stay under IFNAMSIZ (15): "lm" + 5 digits + "h"/"n" + index.
  if (!Run("ip link add " + bridge_ + " type bridge") ||
      !Run("ip addr add " + host_ip() + "/24 dev " + bridge_) ||
      !Run("ip link set " + bridge_ + " up")) {
    return;
  }
  for (int i = 0; i < count_; ++i) {
    if (!Run("ip netns add " + Namespace(i))) return;
    ++made_;
    if (!Run("ip link add " + HostEnd(i) + " type veth peer name " + FarEnd(i)) ||
        !Run("ip link set " + FarEnd(i) + " netns " + Namespace(i)) ||
        !Run("ip link set " + HostEnd(i) + " master " + bridge_) ||
        !Run("ip link set " + HostEnd(i) + " up") ||
        !Run(Exec(i, "ip addr add " + ip(i) + "/24 dev " + FarEnd(i))) ||
        !Run(Exec(i, "ip link set " + FarEnd(i) + " up")) ||
        !Run(Exec(i, "ip link set lo up"))) {
      return;
    }
  }
  ok_ = true;
}

BridgedNamespaces::~BridgedNamespaces() {
  std::string out;
  // Deleting a namespace deletes its end of the veth, and with it the pair.
  for (int i = 0; i < made_; ++i) RunCommand("ip netns del " + Namespace(i), &out);
  for (int i = 0; i < count_; ++i) RunCommand("ip link del " + HostEnd(i) + " 2>/dev/null", &out);
  RunCommand("ip link del " + bridge_ + " 2>/dev/null", &out);
}

std::string BridgedNamespaces::Exec(int i, const std::string& command) const {
  return "ip netns exec " + Namespace(i) + " " + command;
}

bool BridgedNamespaces::SetLinkUp(int i, bool up) {
  return Run("ip link set " + HostEnd(i) + (up ? " up" : " down"));
}

bool BridgedNamespaces::Run(const std::string& command) {
  std::string out;
  if (RunCommand(command, &out) == 0) return true;
  error_ = command + ": " + out;
  return false;
}

std::string BridgedNamespaces::Namespace(int i) const {
  return "lumen-test-" + std::to_string(::getpid()) + "-" + std::to_string(i);
}
std::string BridgedNamespaces::HostEnd(int i) const { return "lm" + tag_ + "h" + std::to_string(i); }
std::string BridgedNamespaces::FarEnd(int i) const { return "lm" + tag_ + "n" + std::to_string(i); }

}  // namespace lumen::test
