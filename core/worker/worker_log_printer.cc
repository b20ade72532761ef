#include "core/worker/worker_log_printer.h"

#include "absl/strings/str_cat.h"
#include "lumen/common/ids.h"
#include "lumen/common/proto_util.h"

namespace lumen::runtime {

std::string WorkerLogPrinter::Prefix(const std::string& name, int pid, const std::string& node) {
  return absl::StrCat("(", name, name.empty() ? "" : " ", "pid=", pid, ", node=", node, ") ");
}

void WorkerLogPrinter::Print(proto::WorkerLogBatch::Reader batch) const {
  std::string node = IdFrom<NodeId>(batch.getNodeId()).Hex().substr(0, 12);
  bool wrote_out = false, wrote_err = false;
  for (auto line : batch.getLines()) {
    std::string text = Prefix(line.getName().cStr(), line.getPid(), node);
    text.append(line.getText().cStr(), line.getText().size());
    text.push_back('\n');
    std::FILE* f = line.getStderr() ? err_ : out_;
    std::fwrite(text.data(), 1, text.size(), f);
    (line.getStderr() ? wrote_err : wrote_out) = true;
  }
  if (batch.getDropped() > 0) {
    std::string note = absl::StrCat("(lumen) ", batch.getDropped(), " lines of worker output on node ",
                                    node, " were not forwarded: this driver did not read them fast "
                                    "enough (they are in the node's log files: lumen logs)\n");
    std::fwrite(note.data(), 1, note.size(), err_);
    wrote_err = true;
  }
  if (wrote_out) std::fflush(out_);
  if (wrote_err) std::fflush(err_);
}

}  // namespace lumen::runtime
