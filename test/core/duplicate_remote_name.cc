// A program that registers two different functions under one LUMEN_REMOTE
// name ("Ping", from two namespaces). It must not start: the registry aborts at
// static initialisation with a message naming the function (checked by the
// CTest test duplicate_remote_name_test, test/core/CMakeLists.txt). Reaching
// main is the failure.
#include <cstdio>

#include "lumen/lumen.h"

namespace first {
int Ping() { return 1; }
LUMEN_REMOTE(Ping);
}  // namespace first

namespace second {
int Ping() { return 2; }
LUMEN_REMOTE(Ping);
}  // namespace second

int main() {
  std::puts("started although two functions share the name 'Ping'");
  return 0;
}
