// A driver for logs_test: joins the running cluster (LUMEN_ADDRESS), runs a
// task and an actor call that print to stdout and stderr, prints where they
// ran, and shuts down. `log_driver [quiet] TAG`: quiet sets
// Config::log_to_driver = false. `log_driver flood N`: times N lines from a
// task to this driver. `log_driver progress`: one Get of 40 tasks of 100 ms
// (~2 s on 2 CPUs), long enough for the driver's progress bar.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "lumen/lumen.h"

namespace {

int Shout(std::string tag) {
  std::cout << "shout-out " << tag << std::endl;
  std::fprintf(stderr, "shout-err %s\n", tag.c_str());
  return ::getpid();
}

// Prints `lines` lines of 80 characters (for measuring forwarding).
int Flood(int lines) {
  std::string line(79, '.');
  for (int i = 0; i < lines; ++i) std::printf("%s\n", line.c_str());
  return lines;
}

int Nap(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
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

LUMEN_REMOTE(Shout, Flood, Nap, Speaker::Create, &Speaker::Say);

int main(int argc, char** argv) {
  bool quiet = argc > 2 && std::string(argv[1]) == "quiet";
  std::string tag = argc > 1 ? argv[argc - 1] : "none";
  lumen::Config config;
  config.log_to_driver = !quiet;
  lumen::Init(config, argc, argv);
  if (argc > 2 && std::string(argv[1]) == "flood") {
    // `log_driver flood N`: how long N lines take to reach this driver
    // (Shutdown returns once the node forwarded what the worker wrote).
    auto start = std::chrono::steady_clock::now();
    int n = *lumen::Get(lumen::Task(Flood).Remote(std::stoi(argv[2])));
    lumen::Shutdown();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "flood: %d lines of 80 bytes printed by a task reached the driver in %.0f ms (%.0f lines/s)\n",
                 n, ms, n / ms * 1000);
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "progress") {
    std::vector<lumen::ObjectRef<int>> naps;
    for (int i = 0; i < 40; ++i) naps.push_back(lumen::Task(Nap).Remote(100));
    auto values = lumen::Get(naps);
    std::cout << "progress-done " << values.size() << std::endl;
    lumen::Shutdown();
    return 0;
  }
  int task_pid = *lumen::Get(lumen::Task(Shout).Remote(tag));
  auto speaker = lumen::Actor(Speaker::Create).SetName("narrator-" + tag).Remote();
  int actor_pid = *lumen::Get(speaker.Task(&Speaker::Say).Remote(tag));
  std::cout << "driver-done task_pid=" << task_pid << " actor_pid=" << actor_pid << std::endl;
  lumen::Shutdown();
  return 0;
}
