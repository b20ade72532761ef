// ReadProcFile (lumen/common/process.h): the /proc files of processes that
// may exit while they are read.
#include "lumen/common/process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

TEST_CASE("ReadProcFile reads a live process's stat and gives empty text once it is gone") {
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  const std::string path = "/proc/" + std::to_string(child) + "/stat";
  std::string live = lumen::ReadProcFile(path);
  CHECK(live.rfind(std::to_string(child) + " (", 0) == 0);

  REQUIRE(::kill(child, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(lumen::ReadProcFile(path).empty());
  CHECK(lumen::ReadProcFile("/proc/self/no-such-file").empty());
}
