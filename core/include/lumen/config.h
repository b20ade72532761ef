// lumen::Config: what lumen::Init takes.
//
//   lumen::Config config;
//   config.num_cpus = 4;                       // embedded cluster with 4 CPUs
//   lumen::Init(config);
//
//   config.address = "127.0.0.1:6380";        // or join a running cluster
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lumen {

struct Config {
  // Head address "host:port" of a running cluster (`lumen start --head`), or
  // "auto" for the one started last on this machine. Empty (and no LUMEN_ADDRESS
  // in the environment): start an embedded local cluster, torn down by Shutdown.
  std::string address;
  // Embedded cluster only: resources of its node. Unset means detect.
  std::optional<double> num_cpus;
  std::optional<double> num_gpus;               // 0: none, even if GPUs are detected
  std::optional<uint64_t> memory;               // bytes
  std::optional<uint64_t> object_store_memory;  // bytes; default 30% of RAM
  std::map<std::string, double> resources;      // custom resources
  // Directories holding shared libraries with user code, for generic workers.
  // Not used yet: workers always re-execute the driver's own binary.
  std::vector<std::string> code_search_path;
  // Shared secret for clusters listening beyond loopback.
  std::string token;
  // Print what this job's workers write to stdout/stderr on this driver's
  // terminal, each line prefixed "(Task pid=P, node=N)". false (or
  // LUMEN_LOG_TO_DRIVER=0 in the environment): only the per-worker files
  // under the session directory get them (`lumen logs`).
  bool log_to_driver = true;
};

}  // namespace lumen
