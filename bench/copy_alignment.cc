// The copy a large Put makes, alone: 800 MiB from a std::vector (its data 16
// bytes into a page) into a populated memfd mapping, at several offsets of the
// destination within its page, with glibc's memcpy, lumen::CopyBytes and
// lumen::StreamCopyBytes (what CopyBytes does where StreamCopyPays).
// A Put's array lands 64 or 128 bytes into a page (objects 64-byte aligned in
// the store, the array after a 64-byte header); memcpy_gigabytes copies
// between two vectors, both 16 bytes into a page. Prints GB/s (10^9 bytes).
//
//   build/bench/copy_alignment [MiB] [rounds]      # default 800 3
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "lumen/common/stream_copy.h"

int main(int argc, char** argv) {
  const size_t bytes = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 800) << 20;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  std::vector<int64_t> array(bytes / sizeof(int64_t), 0);
  const auto* src = reinterpret_cast<const uint8_t*>(array.data());
  const size_t span = bytes + (1 << 20);
  int fd = memfd_create("copy_alignment", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(span)) != 0) return 1;
  void* map = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return 1;
  auto* shm = static_cast<uint8_t*>(map);
  std::memset(shm, 0, span);  // populated, as the store's pages after their first write
  const size_t source_offset = reinterpret_cast<uintptr_t>(src) % 4096;
  std::printf("source at page offset %zu, %zu MiB; CopyBytes streams here: %s\n", source_offset,
              bytes >> 20, lumen::StreamCopyPays() ? "yes" : "no");
  auto rate = [&](auto copy) {
    auto start = std::chrono::steady_clock::now();
    copy();
    asm volatile("" : : "r"(shm) : "memory");
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return static_cast<double>(bytes) / s / 1e9;
  };
  for (int r = 0; r < rounds; ++r) {
    std::printf("round %d: dest page offset: memcpy / CopyBytes / StreamCopyBytes GB/s\n", r + 1);
    for (size_t offset : {source_offset, size_t{0}, size_t{64}, size_t{128}, size_t{2048}}) {
      uint8_t* dest = shm + 4096 + offset;
      double m = rate([&] { std::memcpy(dest, src, bytes); });
      double c = rate([&] { lumen::CopyBytes(dest, src, bytes); });
      double t = rate([&] { lumen::StreamCopyBytes(dest, src, bytes); });
      std::printf("  %5zu%s  %6.2f / %6.2f / %6.2f\n", offset,
                  offset == source_offset ? " (same)" : "       ", m, c, t);
    }
  }
  munmap(map, span);
  close(fd);
  return 0;
}
