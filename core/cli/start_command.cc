#include "core/cli/start_command.h"

#include <filesystem>
#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include <boost/asio.hpp>

#include "core/runtime/cluster.h"
#include "lumen/common/address.h"
#include "lumen/common/head_client.h"
#include "lumen/common/ids.h"
#include "lumen/common/timeouts.h"

namespace lumen::cli {
namespace {

// The local IP a connection toward `host` would leave from (no packet is sent),
// or loopback when there is no route.
std::string LocalAddressToward(const std::string& host) {
  if (IsLoopbackHost(host)) return "127.0.0.1";
  boost::asio::io_context io;
  boost::system::error_code ec;
  auto address = boost::asio::ip::make_address(host, ec);
  if (ec) {
    boost::asio::ip::udp::resolver resolver(io);
    auto results = resolver.resolve(boost::asio::ip::udp::v4(), host, "9", ec);
    if (ec || results.empty()) return "127.0.0.1";
    address = results.begin()->endpoint().address();
  }
  boost::asio::ip::udp::socket probe(io);
  probe.open(address.is_v4() ? boost::asio::ip::udp::v4() : boost::asio::ip::udp::v6(), ec);
  if (!ec) probe.connect(boost::asio::ip::udp::endpoint(address, 9), ec);
  if (ec) return "127.0.0.1";
  auto local = probe.local_endpoint(ec);
  return ec ? "127.0.0.1" : local.address().to_string();
}

// The cluster spec `options` describe; fails only when the head to join cannot
// be resolved.
absl::StatusOr<runtime::ClusterSpec> SpecFor(const StartOptions& options) {
  runtime::ClusterSpec spec;
  spec.embedded = false;
  spec.start_head = options.head;
  if (!spec.start_head) {
    auto head = runtime::ResolveHeadAddress(options.address);
    if (!head.ok()) return head.status();
    spec.head_address = *head;
  }
  if (options.port) spec.head_port = *options.port;
  if (options.host) spec.head_host = *options.host;
  // The address this node's daemon and workers listen on: given, or the one
  // this machine reaches the head from (loopback for a local head).
  if (options.node_ip_address) {
    spec.node_host = *options.node_ip_address;
  } else if (!spec.start_head) {
    spec.node_host = LocalAddressToward(spec.head_address.substr(0, spec.head_address.rfind(':')));
  } else if (!IsLoopbackHost(spec.head_host)) {
    spec.node_host = spec.head_host == "0.0.0.0" ? LocalAddressToward("192.0.2.1") : spec.head_host;
  }
  if (options.token) runtime::SetHeadToken(*options.token);
  spec.token = runtime::HeadToken();
  if (options.metrics_port) spec.metrics_port = *options.metrics_port;
  if (options.metrics_host) {
    spec.metrics_host = *options.metrics_host;
    if (!options.metrics_port) spec.metrics_port = 0;
  }
  bool beyond_loopback = !IsLoopbackHost(spec.head_host) || !IsLoopbackHost(spec.node_host) ||
                         (spec.metrics_port >= 0 && !IsLoopbackHost(spec.metrics_host));
  if (spec.start_head && beyond_loopback && spec.token.empty()) {
    // Beyond loopback every connection must present the cluster's token.
    spec.token = JobId::Random().Hex() + JobId::Random().Hex();
    runtime::SetHeadToken(spec.token);
  }
  if (options.num_cpus) spec.resources["CPU"] = *options.num_cpus;
  if (options.num_gpus) spec.resources["GPU"] = *options.num_gpus;
  if (options.memory) spec.resources["memory"] = *options.memory;
  if (options.object_store_memory) spec.object_store_bytes = *options.object_store_memory;
  if (options.memory_budget) spec.memory_budget_bytes = *options.memory_budget;
  if (options.head_persistence) spec.head_persistence = *options.head_persistence;
  if (options.external_storage) spec.head_external_storage = *options.external_storage;
  if (options.object_spilling_directory) {
    std::error_code ec;
    auto dir = std::filesystem::absolute(*options.object_spilling_directory, ec);
    spec.spill_dir = ec ? *options.object_spilling_directory : dir.string();
  }
  for (const auto& [name, qty] : options.resources) spec.resources[name] = qty;
  if (spec.resources.contains("GPU") && spec.resources["GPU"] == 0) spec.resources.erase("GPU");
  return spec;
}

void PrintStarted(const runtime::ClusterSpec& spec, const runtime::ClusterProcesses& cluster) {
  // Where others reach the head: a wildcard listen address is not one.
  std::string reach = cluster.head_address;
  if (spec.head_host == "0.0.0.0" || spec.head_host == "::") {
    reach = spec.node_host + cluster.head_address.substr(cluster.head_address.rfind(':'));
  }
  if (!spec.start_head) {
    std::cout << "Started a Lumen node joined to " << cluster.head_address << " (listening on "
              << spec.node_host << ").\n"
              << "  session: " << cluster.session_dir << "\n";
    return;
  }
  std::cout << "Started a Lumen head at " << cluster.head_address << " and one node (listening on "
            << spec.node_host << ").\n"
            << "  session: " << cluster.session_dir << "\n"
            << "  join another node:   lumen start --address " << reach << "\n"
            << "  connect a driver:    LUMEN_ADDRESS=" << reach
            << " ./your_program   (or Config::address)\n"
            << "  show the cluster:    lumen status\n"
            << "  stop everything:     lumen stop\n";
  std::ifstream metrics(cluster.session_dir + "/metrics_address");
  std::string metrics_address;
  if (std::getline(metrics, metrics_address) && !metrics_address.empty()) {
    std::cout << "  Prometheus metrics:  http://" << metrics_address << "/metrics\n";
    std::cout << "  dashboard:           http://" << metrics_address << "/"
              << (cluster.token_file.empty() ? "" : "#token=<the token>") << "\n";
  }
  if (!cluster.token_file.empty()) {
    std::cout << "  this head listens on " << spec.head_host
              << ": every connection needs its token, kept in " << cluster.token_file
              << " (readable by you only); pass it with --token or LUMEN_TOKEN, or "
                 "Config::token in a driver\n";
  }
}

}  // namespace

absl::Status RunStart(const StartOptions& options) {
  auto spec = SpecFor(options);
  if (!spec.ok()) return spec.status();
  auto cluster = runtime::StartCluster(*spec);
  if (!cluster.ok()) return cluster.status();
  // Wait until the head lists the new node, so a driver started next finds it.
  // Timeouts::start_wait (LUMEN_START_WAIT_MS).
  auto deadline = std::chrono::steady_clock::now() + Timeouts::FromEnv().start_wait;
  while (std::chrono::steady_clock::now() < deadline) {
    auto nodes = runtime::QueryNodes(cluster->head_address);
    bool listed = false;
    if (nodes.ok()) {
      for (const auto& n : *nodes) listed |= n.address == cluster->node_socket && n.alive;
    }
    if (listed) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the head's table
  }
  PrintStarted(*spec, *cluster);
  return absl::OkStatus();
}

}  // namespace lumen::cli
