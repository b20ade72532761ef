// WorkerLogPrinter: a driver's end of log forwarding. The node daemons send
// it the lines its workers write (workerLogs frames, core/node/
// worker_log_router.h); it prints each on the driver's own stdout or stderr,
// as the worker wrote it, after a prefix naming the writer, as Ray does:
//
//   (Fit pid=4242, node=1a2b3c4d5e6f) epoch 3: loss 0.12
//   (pid=4243, node=1a2b3c4d5e6f) a line written before any task ran
//
// Lines a daemon dropped because this driver did not keep up are counted on
// stderr. Thread-safe (stateless; one fwrite per line).
#pragma once

#include <cstdio>
#include <string>

#include "lumen/common/connection.h"

namespace lumen::runtime {

class WorkerLogPrinter {
 public:
  // Prints to `out` (stdout lines) and `err` (stderr lines); borrowed.
  WorkerLogPrinter(std::FILE* out = stdout, std::FILE* err = stderr) : out_(out), err_(err) {}
  void Print(proto::WorkerLogBatch::Reader batch) const;
  // "(Fit pid=4242, node=1a2b3c4d5e6f) "
  static std::string Prefix(const std::string& name, int pid, const std::string& node);

 private:
  std::FILE* out_;
  std::FILE* err_;
};

}  // namespace lumen::runtime
