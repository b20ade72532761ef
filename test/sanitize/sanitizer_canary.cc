// sanitizer_canary: the self-check of `scripts/test --sanitize`. It proves that
// a sanitizer report made in a worker process (not in the test binary that
// ctest watches) reaches the script: the worker inherits ASAN_OPTIONS and
// UBSAN_OPTIONS through the node daemon and halts on the first report. An ASan
// report goes to the log_path files the script scans after ctest; a UBSan
// report goes to the worker's stderr (GCC 12's combined runtime ignores
// log_path for UBSan), which its node forwards to this driver, where the
// tests' FAIL_REGULAR_EXPRESSION sees it.
//
//   sanitizer_canary asan    # a worker reads freed memory (heap-use-after-free)
//   sanitizer_canary ubsan   # a worker overflows a signed int (undefined behaviour)
//
// Exits 0 when the task failed as it must (its worker halted on the report)
// and, for ubsan, the report reached this driver's stderr within 10 s; 1
// otherwise. Built only in the sanitizer build (LUMEN_SANITIZE): in a plain
// build these functions are undefined behaviour that nothing reports.
#include <lumen/lumen.h>

#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

namespace {

int ReadAfterFree(int x) {
  int* values = new int[4];
  values[0] = x;
  delete[] values;
  volatile int* stale = values;  // volatile: the compiler keeps the read
  return stale[0];
}

int OverflowSignedInt(int x) {
  volatile int big = INT_MAX;  // volatile: no constant folding at compile time
  return big + x;
}

// The text written so far to the file at `path`.
std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

LUMEN_REMOTE(ReadAfterFree, OverflowSignedInt);

int main(int argc, char** argv) {
  lumen::Init(argc, argv);
  const std::string which = argc > 1 ? argv[1] : "";
  // This driver's stderr (where forwarded worker lines are printed) goes to a
  // file it can read back; copied to the real stderr at the end.
  char capture[] = "/tmp/lumen_sanitizer_canary_XXXXXX";
  int capture_fd = ::mkstemp(capture);
  int real_stderr = ::dup(STDERR_FILENO);
  if (capture_fd >= 0) ::dup2(capture_fd, STDERR_FILENO);
  int rc = 1;
  try {
    lumen::ObjectRef<int> ref;
    if (which == "asan") {
      ref = lumen::Task(ReadAfterFree).SetMaxRetries(0).Remote(1);
    } else if (which == "ubsan") {
      ref = lumen::Task(OverflowSignedInt).SetMaxRetries(0).Remote(1);
    } else {
      std::cerr << "usage: sanitizer_canary asan|ubsan\n";
      lumen::Shutdown();
      return 1;
    }
    int value = *lumen::Get(ref);
    std::cerr << "sanitizer_canary " << which << ": the task returned " << value
              << ": its worker was not stopped by the sanitizer\n";
  } catch (const lumen::Error& e) {
    std::cout << "sanitizer_canary " << which << ": the task failed as expected: " << e.what()
              << "\n";
    rc = 0;
    if (which == "ubsan") {
      // The forwarded report arrives asynchronously: wait for it, bounded.
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (ReadAll(capture).find("runtime error:") == std::string::npos) {
        if (std::chrono::steady_clock::now() > deadline) {
          std::cout << "sanitizer_canary ubsan: no UBSan report reached this driver in 10 s\n";
          rc = 1;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }
  lumen::Shutdown();
  std::fflush(stderr);
  ::dup2(real_stderr, STDERR_FILENO);
  std::cerr << ReadAll(capture);
  ::unlink(capture);
  return rc;
}
