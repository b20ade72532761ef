// `lumen microbenchmark`: Ray's microbenchmark metrics, measured on an embedded
// local cluster. Prints one line per metric: `name value unit`.
#pragma once

namespace lumen::bench {

int RunMicrobenchmark(int argc, char** argv);

}  // namespace lumen::bench
