// The `lumen` command line: start and stop clusters, show their state, and run
// the microbenchmark.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/microbenchmark.h"
#include "core/runtime/cluster.h"
#include "lumen/common/head_client.h"
#include "lumen/common/address.h"
#include "lumen/common/process.h"
#include "lumen/lumen.h"
#include "lumen/objectstore/object_table.h"

namespace {

using lumen::runtime::NodeView;

constexpr const char* kUsage = R"(usage: lumen <command> [options]

commands:
  start --head [--port P] [--host H]       start a head and a node daemon in the background
                                            (a host beyond loopback makes a token; see below)
  start --address HOST:PORT                 start one more node daemon joined to that head
                                            (again for each further node on this machine)
        [--node-ip-address IP]              where this node listens (default: the address
                                            this machine reaches the head from)
        [--num-cpus N] [--num-gpus N] [--memory BYTES] [--object-store-memory BYTES]
        [--resources '{"name": qty, ...}']
  stop                                      stop every cluster started by `lumen start` here
  status [--address HOST:PORT]              nodes (alive/dead), resources used/total, object
                                            stores, workers, waiting and infeasible demand,
                                            placement groups that wait
  list nodes|actors|tasks|objects|placement-groups [--address HOST:PORT]
                                            one line each (actors, tasks and objects: as
                                            their owners know them right now)
  microbenchmark [--quick]                  Ray's microbenchmark metrics on a local cluster

A head listening beyond loopback requires its token on every connection: pass it
with --token TOKEN or LUMEN_TOKEN=TOKEN (drivers: Config::token). On the head's
machine, --address auto reads it from the session's token file.
)";

int Fail(const std::string& message) {
  std::cerr << "lumen: " << message << "\n";
  return 1;
}

// Parses a flat JSON object of numbers: {"ssd": 1, "accel": 0.5}.
bool ParseResourcesJson(const std::string& text, std::map<std::string, double>* out,
                        std::string* error) {
  size_t i = 0;
  auto skip = [&] {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  skip();
  if (i >= text.size() || text[i] != '{') return *error = "expected '{'", false;
  ++i;
  skip();
  if (i < text.size() && text[i] == '}') return true;
  while (i < text.size()) {
    skip();
    if (text[i] != '"') return *error = "expected a quoted resource name", false;
    size_t end = text.find('"', i + 1);
    if (end == std::string::npos) return *error = "unterminated name", false;
    std::string name = text.substr(i + 1, end - i - 1);
    i = end + 1;
    skip();
    if (i >= text.size() || text[i] != ':') return *error = "expected ':' after \"" + name + "\"", false;
    ++i;
    skip();
    size_t start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' ||
                               text[i] == 'e' || text[i] == 'E' || text[i] == '-' || text[i] == '+'))
      ++i;
    double qty = 0;
    if (!absl::SimpleAtod(text.substr(start, i - start), &qty)) {
      return *error = "resource \"" + name + "\" needs a number", false;
    }
    (*out)[name] = qty;
    skip();
    if (i < text.size() && text[i] == ',') {
      ++i;
      continue;
    }
    if (i < text.size() && text[i] == '}') return true;
    return *error = "expected ',' or '}'", false;
  }
  return *error = "unterminated object", false;
}

struct Flags {
  std::map<std::string, std::string> values;
  std::vector<std::string> positional;
  bool Has(const std::string& k) const { return values.contains(k); }
  std::string Get(const std::string& k) const {
    auto it = values.find(k);
    return it == values.end() ? "" : it->second;
  }
};

Flags ParseFlags(int argc, char** argv, int first) {
  Flags flags;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) == 0) {
      std::string key = arg.substr(2), value;
      auto eq = key.find('=');
      if (eq != std::string::npos) {
        value = key.substr(eq + 1);
        key = key.substr(0, eq);
      } else if (key != "head" && key != "quick" && i + 1 < argc &&
                 std::string(argv[i + 1]).rfind("--", 0) != 0) {
        value = argv[++i];
      }
      flags.values[key] = value;
    } else {
      flags.positional.push_back(arg);
    }
  }
  return flags;
}

std::string FormatQuantity(const std::string& name, double v) {
  if (name.find("memory") != std::string::npos) {
    return lumen::objectstore::FormatBytes(static_cast<uint64_t>(v));
  }
  return absl::StrFormat("%g", v);
}

// The local IP a connection toward `host` would leave from (no packet is sent),
// or loopback when there is no route.
std::string LocalAddressToward(const std::string& host) {
  if (lumen::IsLoopbackHost(host)) return "127.0.0.1";
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

int Start(const Flags& flags) {
  lumen::runtime::ClusterSpec spec;
  spec.embedded = false;
  spec.start_head = flags.Has("head");
  if (!spec.start_head) {
    if (!flags.Has("address")) return Fail("start needs --head or --address HOST:PORT");
    auto head = lumen::runtime::ResolveHeadAddress(flags.Get("address"));
    if (!head.ok()) return Fail(std::string(head.status().message()));
    spec.head_address = *head;
  }
  if (flags.Has("port") && !absl::SimpleAtoi(flags.Get("port"), &spec.head_port)) {
    return Fail("--port needs a number");
  }
  if (flags.Has("host")) spec.head_host = flags.Get("host");
  // The address this node's daemon and workers listen on: given, or the one
  // this machine reaches the head from (loopback for a local head).
  if (flags.Has("node-ip-address")) {
    spec.node_host = flags.Get("node-ip-address");
  } else if (!spec.start_head) {
    spec.node_host = LocalAddressToward(spec.head_address.substr(0, spec.head_address.rfind(':')));
  } else if (!lumen::IsLoopbackHost(spec.head_host)) {
    spec.node_host = spec.head_host == "0.0.0.0" ? LocalAddressToward("192.0.2.1") : spec.head_host;
  }
  if (flags.Has("token")) lumen::runtime::SetHeadToken(flags.Get("token"));
  spec.token = lumen::runtime::HeadToken();
  if (spec.start_head && !lumen::IsLoopbackHost(spec.head_host) && spec.token.empty()) {
    // Beyond loopback every connection must present the cluster's token.
    spec.token = lumen::JobId::Random().Hex() + lumen::JobId::Random().Hex();
    lumen::runtime::SetHeadToken(spec.token);
  }
  auto number = [&](const char* flag, const char* resource) -> bool {
    if (!flags.Has(flag)) return true;
    double v = 0;
    if (!absl::SimpleAtod(flags.Get(flag), &v) || v < 0) return false;
    spec.resources[resource] = v;
    return true;
  };
  if (!number("num-cpus", "CPU")) return Fail("--num-cpus needs a non-negative number");
  if (!number("num-gpus", "GPU")) return Fail("--num-gpus needs a non-negative number");
  if (!number("memory", "memory")) return Fail("--memory needs a number of bytes");
  if (flags.Has("object-store-memory") &&
      !absl::SimpleAtoi(flags.Get("object-store-memory"), &spec.object_store_bytes)) {
    return Fail("--object-store-memory needs a number of bytes");
  }
  if (flags.Has("resources")) {
    std::string error;
    if (!ParseResourcesJson(flags.Get("resources"), &spec.resources, &error)) {
      return Fail("--resources: " + error);
    }
  }
  if (spec.resources.contains("GPU") && spec.resources["GPU"] == 0) spec.resources.erase("GPU");
  auto cluster = lumen::runtime::StartCluster(spec);
  if (!cluster.ok()) return Fail(std::string(cluster.status().message()));
  // Wait until the head lists the new node, so a driver started next finds it.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    auto nodes = lumen::runtime::QueryNodes(cluster->head_address);
    bool listed = false;
    if (nodes.ok()) {
      for (const auto& n : *nodes) listed |= n.address == cluster->node_socket && n.alive;
    }
    if (listed) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the head's table
  }
  // Where others reach the head: a wildcard listen address is not one.
  std::string reach = cluster->head_address;
  if (spec.head_host == "0.0.0.0" || spec.head_host == "::") {
    reach = spec.node_host + cluster->head_address.substr(cluster->head_address.rfind(':'));
  }
  if (spec.start_head) {
    std::cout << "Started a Lumen head at " << cluster->head_address << " and one node (listening on "
              << spec.node_host << ").\n"
              << "  session: " << cluster->session_dir << "\n"
              << "  join another node:   lumen start --address " << reach << "\n"
              << "  connect a driver:    LUMEN_ADDRESS=" << reach
              << " ./your_program   (or Config::address)\n"
              << "  show the cluster:    lumen status\n"
              << "  stop everything:     lumen stop\n";
    if (!cluster->token_file.empty()) {
      std::cout << "  this head listens on " << spec.head_host
                << ": every connection needs its token, kept in " << cluster->token_file
                << " (readable by you only); pass it with --token or LUMEN_TOKEN, or "
                   "Config::token in a driver\n";
    }
  } else {
    std::cout << "Started a Lumen node joined to " << cluster->head_address << " (listening on "
              << spec.node_host << ").\n"
              << "  session: " << cluster->session_dir << "\n";
  }
  return 0;
}

int Stop() {
  int stopped = 0;
  std::error_code ec;
  std::vector<std::filesystem::path> sessions;
  for (const auto& entry : std::filesystem::directory_iterator(lumen::TempRoot(), ec)) {
    if (entry.path().filename().string().rfind("lumen-session-", 0) == 0 &&
        std::filesystem::exists(entry.path() / "cluster.pids", ec)) {
      sessions.push_back(entry.path());
    }
  }
  for (const auto& session : sessions) {
    std::ifstream in(session / "cluster.pids");
    std::vector<pid_t> pids;
    for (pid_t pid; in >> pid;) pids.push_back(pid);
    // Node daemons (listed last) first, then the head.
    for (auto it = pids.rbegin(); it != pids.rend(); ++it) {
      if (!lumen::ProcessAlive(*it)) continue;
      ::kill(*it, SIGTERM);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (lumen::ProcessAlive(*it) && std::chrono::steady_clock::now() < deadline) {
        // Not our child: there is nothing to wait on but its /proc entry.
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (lumen::ProcessAlive(*it)) ::kill(*it, SIGKILL);
      ++stopped;
    }
    std::filesystem::remove_all(session, ec);
  }
  std::cout << "Stopped " << stopped << " Lumen process" << (stopped == 1 ? "" : "es") << ".\n";
  return 0;
}

int Status(const Flags& flags, bool list_only) {
  if (flags.Has("token")) lumen::runtime::SetHeadToken(flags.Get("token"));
  auto head = lumen::runtime::ResolveHeadAddress(flags.Get("address"));
  if (!head.ok()) return Fail(std::string(head.status().message()));
  auto nodes = lumen::runtime::QueryNodes(*head);
  if (!nodes.ok()) return Fail(std::string(nodes.status().message()));
  if (list_only) {
    std::cout << absl::StrFormat("%-14s %-6s %-8s %-20s %s\n", "NODE", "STATE", "PID", "HOST",
                                 "ADDRESS");
    for (const auto& n : *nodes) {
      std::cout << absl::StrFormat("%-14s %-6s %-8d %-20s %s\n", n.id.Hex().substr(0, 12),
                                   n.alive ? "ALIVE" : "DEAD", n.pid, n.hostname, n.address);
    }
    return 0;
  }
  std::cout << "Cluster at " << *head << ": " << nodes->size() << " node"
            << (nodes->size() == 1 ? "" : "s") << "\n";
  for (const auto& n : *nodes) {
    std::cout << "\nNode " << n.id.Hex().substr(0, 12) << "  " << (n.alive ? "alive" : "DEAD")
              << "  host " << n.hostname << "  pid " << n.pid << "\n";
    std::cout << "  resources (used / total):\n";
    for (const auto& [name, total] : n.total) {
      double available = n.available.contains(name) ? n.available.at(name) : 0;
      std::cout << absl::StrFormat("    %-22s %s / %s\n", name,
                                   FormatQuantity(name, total - available),
                                   FormatQuantity(name, total));
    }
    std::cout << absl::StrFormat("  object store: %s / %s in %d objects\n",
                                 lumen::objectstore::FormatBytes(n.store_used),
                                 lumen::objectstore::FormatBytes(n.store_capacity),
                                 n.store_objects);
    std::cout << absl::StrFormat("  workers: %d (%d idle); leases: %d active; lease requests (tasks) waiting: %d\n",
                                 n.workers, n.idle_workers, n.active_leases, n.queued_leases);
  }
  // Demand no node can meet yet, as each node that holds it reports it.
  bool header = false;
  for (const auto& n : *nodes) {
    if (!n.alive) continue;
    for (const auto& d : n.infeasible) {
      if (!header) {
        std::cout << "\nInfeasible demand (waits for a node that fits):\n";
        header = true;
      }
      std::string need;
      for (const auto& [name, qty] : d.resources) {
        absl::StrAppend(&need, need.empty() ? "" : ", ", name, ": ", FormatQuantity(name, qty));
      }
      std::cout << absl::StrFormat("  %d x %s {%s}\n", d.count, d.name, need);
    }
  }
  auto groups = lumen::runtime::QueryPlacementGroups(*head);
  if (groups.ok()) {
    bool pending_header = false;
    for (const auto& g : *groups) {
      if (g.state == "CREATED" || g.state == "REMOVED") continue;
      if (!pending_header) {
        std::cout << "\nPlacement groups waiting:\n";
        pending_header = true;
      }
      std::cout << "  " << g.name << " (" << g.strategy << ", " << g.bundles.size()
                << " bundles): " << g.state << (g.error.empty() ? "" : ": " + g.error) << "\n";
    }
  }
  return 0;
}

void PrintTable(const std::vector<lumen::runtime::StateRow>& rows) {
  if (rows.empty()) {
    std::cout << "(none)\n";
    return;
  }
  std::vector<std::string> columns;
  for (const auto& row : rows) {
    for (const auto& [key, value] : row) {
      if (std::find(columns.begin(), columns.end(), key) == columns.end()) columns.push_back(key);
    }
  }
  std::vector<size_t> widths(columns.size());
  for (size_t c = 0; c < columns.size(); ++c) widths[c] = columns[c].size();
  auto value_of = [](const lumen::runtime::StateRow& row, const std::string& key) {
    for (const auto& [k, v] : row)
      if (k == key) return v;
    return std::string();
  };
  for (const auto& row : rows) {
    for (size_t c = 0; c < columns.size(); ++c) {
      widths[c] = std::max(widths[c], value_of(row, columns[c]).size());
    }
  }
  for (size_t c = 0; c < columns.size(); ++c) {
    std::cout << absl::StrFormat("%-*s  ", static_cast<int>(widths[c]), columns[c]);
  }
  std::cout << "\n";
  for (const auto& row : rows) {
    for (size_t c = 0; c < columns.size(); ++c) {
      std::cout << absl::StrFormat("%-*s  ", static_cast<int>(widths[c]), value_of(row, columns[c]));
    }
    std::cout << "\n";
  }
}

int List(const Flags& flags, const std::string& what) {
  if (what == "nodes") return Status(flags, true);
  if (flags.Has("token")) lumen::runtime::SetHeadToken(flags.Get("token"));
  auto head = lumen::runtime::ResolveHeadAddress(flags.Get("address"));
  if (!head.ok()) return Fail(std::string(head.status().message()));
  if (what == "placement-groups") {
    auto groups = lumen::runtime::QueryPlacementGroups(*head);
    if (!groups.ok()) return Fail(std::string(groups.status().message()));
    std::vector<lumen::runtime::StateRow> rows;
    for (const auto& g : *groups) {
      std::string bundles, nodes;
      for (size_t i = 0; i < g.bundles.size(); ++i) {
        std::string one;
        for (const auto& [name, qty] : g.bundles[i]) {
          absl::StrAppend(&one, one.empty() ? "" : " ", name, ":", FormatQuantity(name, qty));
        }
        absl::StrAppend(&bundles, i ? " | " : "", one);
        absl::StrAppend(&nodes, i ? "," : "",
                        g.bundle_nodes[i].empty() ? "-" : g.bundle_nodes[i].substr(0, 12));
      }
      rows.push_back({{"GROUP_ID", g.id.substr(0, 16)},
                      {"NAME", g.name},
                      {"STRATEGY", g.strategy},
                      {"STATE", g.state},
                      {"BUNDLES", bundles},
                      {"NODES", nodes},
                      {"WHY_WAITING", g.error}});
    }
    PrintTable(rows);
    return 0;
  }
  if (what != "actors" && what != "tasks" && what != "objects") {
    return Fail("list supports: nodes, actors, tasks, objects, placement-groups");
  }
  auto nodes = lumen::runtime::QueryNodes(*head);
  if (!nodes.ok()) return Fail(std::string(nodes.status().message()));
  std::vector<lumen::runtime::StateRow> rows;
  for (const auto& n : *nodes) {
    if (!n.alive) continue;
    auto part = lumen::runtime::QueryNodeState(n.address, what);
    if (!part.ok()) {
      std::cerr << "lumen: node " << n.id.Hex().substr(0, 12)
                << " did not answer: " << part.status().message() << "\n";
      continue;
    }
    rows.insert(rows.end(), part->begin(), part->end());
  }
  PrintTable(rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Daemons and workers of clusters started from this binary run here.
  if (std::getenv("LUMEN_ROLE") != nullptr && *std::getenv("LUMEN_ROLE") != '\0') {
    lumen::Init(argc, argv);
  }
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "help") {
    std::cout << kUsage;
    return argc < 2 ? 1 : 0;
  }
  std::string command = argv[1];
  Flags flags = ParseFlags(argc, argv, 2);
  if (command == "start") return Start(flags);
  if (command == "stop") return Stop();
  if (command == "status") return Status(flags, false);
  if (command == "list") return List(flags, flags.positional.empty() ? "" : flags.positional[0]);
  if (command == "microbenchmark") return lumen::bench::RunMicrobenchmark(argc - 1, argv + 1);
  std::cerr << kUsage;
  return Fail("unknown command '" + command + "'");
}
