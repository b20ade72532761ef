// Runs one task on an embedded cluster through an installed Lumen.
#include <lumen/lumen.h>

#include <iostream>

int Plus(int a, int b) { return a + b; }
LUMEN_REMOTE(Plus);

int main(int argc, char** argv) {
  lumen::Config config;
  config.num_cpus = 1;
  config.object_store_memory = 64ull << 20;
  lumen::Init(config, argc, argv);  // workers re-run this binary: first thing in main
  int sum = *lumen::Get(lumen::Task(Plus).Remote(1, 2));
  lumen::Shutdown();
  std::cout << "lumen consumer: 1 + 2 = " << sum << std::endl;
  return sum == 3 ? 0 : 1;
}
