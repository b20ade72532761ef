// RotatingLogFile: a worker's log file never grows past its bound; the
// previous part is kept as PATH.1, and nothing written is lost across a rotation.
#include "core/node/rotating_log_file.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("a log file rotates to .1 before passing its bound and keeps the newest writes") {
  std::string dir = std::filesystem::temp_directory_path() /
                    ("lumen-rotating-log-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/worker-1.out";
  {
    lumen::node::RotatingLogFile file(path, 100);
    CHECK_FALSE(std::filesystem::exists(path));  // created on the first write
    std::string all;
    for (int i = 0; i < 30; ++i) {
      std::string line = "line " + std::to_string(i) + "\n";  // 7 or 8 bytes
      REQUIRE(file.Write(line).ok());
      all += line;
      REQUIRE(file.size() <= 100);
      REQUIRE(std::filesystem::file_size(path) <= 100);
    }
    CHECK(file.rotations() >= 2);
    // The two parts hold the end of what was written, in order, without a gap.
    std::string kept = ReadFile(path + ".1") + ReadFile(path);
    CHECK(all.substr(all.size() - kept.size()) == kept);
    CHECK(ReadFile(path).find("line 29\n") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(path + ".2"));
  }
  // A write larger than the bound still goes whole (into a fresh file).
  {
    lumen::node::RotatingLogFile file(path, 10);
    REQUIRE(file.Write(std::string(25, 'z')).ok());
    CHECK(ReadFile(path) == std::string(25, 'z'));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("LUMEN_LOG_MAX_BYTES sets the bound, 64 MiB without it") {
  ::unsetenv("LUMEN_LOG_MAX_BYTES");
  CHECK(lumen::node::WorkerLogMaxBytes() == (uint64_t{64} << 20));
  ::setenv("LUMEN_LOG_MAX_BYTES", "4096", 1);
  CHECK(lumen::node::WorkerLogMaxBytes() == 4096);
  ::setenv("LUMEN_LOG_MAX_BYTES", "nonsense", 1);
  CHECK(lumen::node::WorkerLogMaxBytes() == (uint64_t{64} << 20));
  ::unsetenv("LUMEN_LOG_MAX_BYTES");
}
