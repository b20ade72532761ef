// A driver for logs_test: joins the running cluster (LUMEN_ADDRESS), runs a
// task and an actor call that print to stdout and stderr, prints where they
// ran, and shuts down. `log_driver [quiet] TAG`: quiet sets
// Config::log_to_driver = false.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "lumen/lumen.h"

namespace {

int Shout(std::string tag) {
  std::cout << "shout-out " << tag << std::endl;
  std::fprintf(stderr, "shout-err %s\n", tag.c_str());
  return ::getpid();
}

class Speaker {
 public:
  static Speaker* Create() { return new Speaker(); }
  // No explicit flush: a worker's stdout is line-buffered.
  int Say(std::string tag) {
    std::printf("speaker %s\n", tag.c_str());
    return ::getpid();
  }
};

}  // namespace

LUMEN_REMOTE(Shout, Speaker::Create, &Speaker::Say);

int main(int argc, char** argv) {
  bool quiet = argc > 2 && std::string(argv[1]) == "quiet";
  std::string tag = argc > 1 ? argv[argc - 1] : "none";
  lumen::Config config;
  config.log_to_driver = !quiet;
  lumen::Init(config, argc, argv);
  int task_pid = *lumen::Get(lumen::Task(Shout).Remote(tag));
  auto speaker = lumen::Actor(Speaker::Create).SetName("narrator-" + tag).Remote();
  int actor_pid = *lumen::Get(speaker.Task(&Speaker::Say).Remote(tag));
  std::cout << "driver-done task_pid=" << task_pid << " actor_pid=" << actor_pid << std::endl;
  lumen::Shutdown();
  return 0;
}
