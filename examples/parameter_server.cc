// A parameter server, after Ray's parameter-server example: logistic regression
// on synthetic data, trained by DataWorker actors that compute gradients on
// their shard and a lumen::train::ParameterServer actor that applies them,
// synchronously (all workers' gradients averaged per step) and asynchronously
// (each worker's gradient applied as soon as it arrives).
//
//   build/examples/parameter_server [--mode sync|async|both] [--iterations N] [--workers N]
//                                   [--learning-rate F] [--momentum F]
//
// Prints the held-out loss every 10 iterations and, per mode, a line
// "<mode>: final accuracy <a>".
#include "parameter_server.h"

#include <lumen/lumen.h>
#include <lumen/train/parameter_server.h>

#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <string>

namespace {

int Usage(const char* argv0) {
  std::cerr << "usage: " << argv0 << " [--mode sync|async|both] [--iterations N] [--workers N]\n"
            << "       [--learning-rate F (0.02)] [--momentum F (0.9)]\n";
  return 2;
}

bool ParseFloat(const char* text, float* out) {
  char* end = nullptr;
  float v = std::strtof(text, &end);
  if (end == text || *end != '\0') return false;
  *out = v;
  return true;
}

bool ParsePositive(const char* text, int* out) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < 1 || v > 1000000) return false;
  *out = static_cast<int>(v);
  return true;
}

void Report(const char* mode, const ps_example::TrainResult& r, const ps_example::TrainOptions& o) {
  std::cout << mode << ": final loss " << std::setprecision(4) << r.loss << ", " << r.version
            << " updates from " << o.workers << " workers in " << std::setprecision(2) << r.seconds
            << " s\n";
  std::cout << mode << ": final accuracy " << std::fixed << std::setprecision(4) << r.accuracy
            << std::defaultfloat << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  lumen::Init(argc, argv);  // first: workers re-execute this binary

  std::string mode = "both";
  ps_example::TrainOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if ((arg == "--mode" || arg == "--iterations" || arg == "--workers" ||
         arg == "--learning-rate" || arg == "--momentum") &&
        i + 1 >= argc) {
      return Usage(argv[0]);
    }
    if (arg == "--mode") {
      mode = argv[++i];
      if (mode != "sync" && mode != "async" && mode != "both") return Usage(argv[0]);
    } else if (arg == "--iterations") {
      if (!ParsePositive(argv[++i], &options.iterations)) return Usage(argv[0]);
    } else if (arg == "--workers") {
      if (!ParsePositive(argv[++i], &options.workers)) return Usage(argv[0]);
    } else if (arg == "--learning-rate") {
      if (!ParseFloat(argv[++i], &options.optimizer.learning_rate)) return Usage(argv[0]);
    } else if (arg == "--momentum") {
      if (!ParseFloat(argv[++i], &options.optimizer.momentum)) return Usage(argv[0]);
    } else {
      return Usage(argv[0]);
    }
  }
  options.log = &std::cout;
  std::cout << std::setprecision(4);
  std::cout << "logistic regression, " << options.data.dims << " features, "
            << options.data.num_train << " training / " << options.data.num_test
            << " held-out samples, " << options.workers << " data workers\n";

  try {
    if (mode == "sync" || mode == "both") {
      Report("sync", ps_example::RunSync(options), options);
    }
    if (mode == "async" || mode == "both") {
      Report("async", ps_example::RunAsync(options), options);
    }
  } catch (const lumen::Error& e) {
    std::cerr << "training failed: " << e.what() << "\n";
    lumen::Shutdown();
    return 1;
  }
  lumen::Shutdown();
  return 0;
}
