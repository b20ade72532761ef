#include "core/worker/output_tagger.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "lumen/common/log_markers.h"

namespace lumen::runtime {

bool OutputTagger::EnabledByEnvironment() {
  const char* v = std::getenv(kLogMarkersEnv);
  bool enabled = v != nullptr && std::string_view(v) == "1";
  if (enabled) std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return enabled;
}

std::string OutputTagger::ActorLabel(const std::string& factory) {
  size_t sep = factory.rfind("::");
  return sep == std::string::npos || sep == 0 ? factory : factory.substr(0, sep);
}

void OutputTagger::TaskStarting(proto::TaskKind kind, const std::string& function,
                                const std::string& actor_name) {
  if (!enabled_ || kind == proto::TaskKind::ACTOR_METHOD) return;
  absl::MutexLock lock(&mu_);
  if (kind == proto::TaskKind::ACTOR_CREATION) {
    is_actor_ = true;
    last_ = actor_name.empty() ? ActorLabel(function) : actor_name;
    Mark(kLogMarkerActor, last_);
    return;
  }
  if (is_actor_ || function == last_) return;
  last_ = function;
  Mark(kLogMarkerTask, last_);
}

void OutputTagger::Mark(std::string_view marker, const std::string& name) {
  std::string line(marker);
  for (char c : name) line.push_back(c == '\n' || c == '\r' ? ' ' : c);
  line.push_back('\n');
  // What the previous task left in stdio's buffers belongs before the marker.
  std::fflush(stdout);
  std::fflush(stderr);
  std::cout.flush();
  // One write(2) each: a pipe takes up to PIPE_BUF bytes atomically.
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    ssize_t ignored = ::write(fd, line.data(), std::min<size_t>(line.size(), 4096));
    (void)ignored;
  }
}

}  // namespace lumen::runtime
