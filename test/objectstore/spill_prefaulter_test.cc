// SpillPrefaulter and the SpillWorker's writes with it: the page cache of a
// spill file is faulted in ahead of the writer, and the file still holds
// exactly the bytes written.
#include "lumen/objectstore/spill_prefaulter.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "lumen/objectstore/spill_worker.h"

namespace lumen::objectstore {
namespace {

namespace fs = std::filesystem;

// A fresh directory under $TMPDIR, removed with its files when this goes.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "lumen-prefault-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

uint64_t Seed() {
  const char* env = std::getenv("LUMEN_TEST_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : std::random_device{}();
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::vector<uint8_t> bytes(fs::file_size(path));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::pread(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
  return bytes;
}

TEST_CASE("the prefaulter brings a whole file into the page cache and changes no byte of it") {
  // Invariant: after Start(fd, size) the thread faults in every page of
  // [0, size), and populating never alters bytes already written (the
  // writer and the prefaulter need no ordering).
  TempDir dir;
  const std::string path = dir.path() + "/f";
  constexpr uint64_t kSize = 16ull << 20;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  std::vector<uint8_t> head(kSize / 2 + 123);
  for (size_t i = 0; i < head.size(); ++i) head[i] = static_cast<uint8_t>(i * 7 + 1);
  REQUIRE(::pwrite(fd, head.data(), head.size(), 0) == static_cast<ssize_t>(head.size()));
  REQUIRE(::ftruncate(fd, kSize) == 0);

  SpillPrefaulter prefaulter;
  prefaulter.Start(fd, kSize);
  REQUIRE(::close(fd) == 0);  // the prefaulter holds a mapping, not the fd
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (prefaulter.faulted_bytes() < kSize && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(prefaulter.faulted_bytes() == kSize);
  prefaulter.Finish();

  // Every page is in the page cache (mincore of a fresh read-only mapping).
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  void* map = ::mmap(nullptr, kSize, PROT_READ, MAP_SHARED, fd, 0);
  REQUIRE(map != MAP_FAILED);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident(kSize / page);
  REQUIRE(::mincore(map, kSize, resident.data()) == 0);
  size_t in_cache = 0;
  for (unsigned char r : resident) in_cache += r & 1;
  CHECK(in_cache == resident.size());
  ::munmap(map, kSize);
  ::close(fd);

  std::vector<uint8_t> bytes = ReadFile(path);
  REQUIRE(bytes.size() == kSize);
  CHECK(std::memcmp(bytes.data(), head.data(), head.size()) == 0);
  CHECK(std::all_of(bytes.begin() + static_cast<ptrdiff_t>(head.size()), bytes.end(),
                    [](uint8_t b) { return b == 0; }));
}

TEST_CASE("spill files hold exactly their pieces with and without the prefaulter") {
  // Invariant: whatever the race between the writer and the prefaulter, a
  // spill file is the pieces back to back, nothing more; a write that fails
  // leaves no file. Several files in a row, so a Start supersedes work on
  // the file before.
  const uint64_t seed = Seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  // Pieces of awkward sizes from a source buffer, as objects in a segment.
  std::vector<uint8_t> source(24ull << 20);
  for (size_t i = 0; i < source.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(source.data() + i, &v, std::min<size_t>(8, source.size() - i));
  }
  TempDir dir;
  for (bool prefault : {true, false}) {
    INFO("prefault " << prefault);
    SpillWorker worker([](std::function<void()> fn) { fn(); }, prefault);
    auto write = [&](const std::string& path, std::vector<SpillWorker::Piece> pieces) {
      std::promise<absl::Status> done;
      worker.Write(path, std::move(pieces), [&](absl::Status s) { done.set_value(s); });
      return done.get_future().get();
    };
    for (int file = 0; file < 6; ++file) {
      std::vector<SpillWorker::Piece> pieces;
      std::vector<uint8_t> expected;
      const int n = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) {
        const uint64_t sizes[] = {0, 1, 4097, (3ull << 20) + 5, 8ull << 20};
        const uint64_t size = sizes[rng() % 5];
        const uint64_t at = rng() % (source.size() - size + 1) / 64 * 64;
        pieces.push_back({size == 0 ? nullptr : source.data() + at, size});
        expected.insert(expected.end(), source.begin() + static_cast<ptrdiff_t>(at),
                        source.begin() + static_cast<ptrdiff_t>(at + size));
      }
      const std::string path = dir.path() + "/" + std::to_string(prefault) + "-" + std::to_string(file);
      REQUIRE(write(path, pieces).ok());
      CHECK(ReadFile(path) == expected);
    }
    const std::string missing = dir.path() + "/no-such-dir/f";
    CHECK_FALSE(write(missing, {{source.data(), 1ull << 20}}).ok());
    CHECK_FALSE(fs::exists(missing));
  }
}

}  // namespace
}  // namespace lumen::objectstore
