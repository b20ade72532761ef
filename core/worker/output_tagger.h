// OutputTagger: in a worker whose node daemon reads its stdout and stderr
// (LUMEN_LOG_MARKERS=1), writes a marker line into both streams whenever the
// task or actor running here changes, so the daemon can name the writer of
// the lines that follow (lumen/common/log_markers.h). A loop of one function
// writes one marker; an actor writes one, with its name, at its creation.
//
//   OutputTagger tagger(OutputTagger::EnabledByEnvironment());
//   tagger.TaskStarting(kind, "Fit", /*actor_name=*/"");   // before running it
//
// Thread-safe (executor threads). Internal to core/worker.
#pragma once

#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "lumen/common/connection.h"

namespace lumen::runtime {

class OutputTagger {
 public:
  explicit OutputTagger(bool enabled) : enabled_(enabled) {}
  // LUMEN_LOG_MARKERS=1 in the environment (set by the daemon that starts us);
  // then also makes stdout line-buffered, so lines reach the daemon as they are
  // written rather than at exit.
  static bool EnabledByEnvironment();

  // A task of `kind` named `function` starts. An actor's creation marks the
  // actor (`actor_name`, or the class named by the factory "Class::Create");
  // its method calls keep that mark.
  void TaskStarting(proto::TaskKind kind, const std::string& function,
                    const std::string& actor_name);

  // The name shown for an actor without a name of its own: "Counter" for the
  // factory "Counter::Create", the factory's name otherwise.
  static std::string ActorLabel(const std::string& factory);

 private:
  void Mark(std::string_view marker, const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool enabled_;
  absl::Mutex mu_;
  std::string last_ ABSL_GUARDED_BY(mu_);  // the name last marked
  bool is_actor_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace lumen::runtime
