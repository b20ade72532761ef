#include "lumen/objectstore/shm_segment.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include <catch2/catch.hpp>

#include "lumen/objectstore/fd_passing.h"

namespace lumen::objectstore {
namespace {

constexpr uint64_t kSize = 1 << 20;

std::unique_ptr<ShmSegment> MakeSegment(uint64_t size = kSize) {
  auto seg = ShmSegment::Create("lumen-test", size);
  REQUIRE(seg.ok());
  return std::move(*seg);
}

// Runs `body` in a forked child; returns the waitpid status.
template <typename F>
int RunInChild(F body) {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return status;
}

TEST_CASE("ShmSegment: writes through the RW view show in the RO view", "[shm]") {
  auto seg = MakeSegment();
  CHECK(seg->size() == kSize);
  CHECK(seg->fd() >= 0);
  CHECK(seg->writable_base() != seg->readonly_base());
  CHECK((fcntl(seg->fd(), F_GETFD) & FD_CLOEXEC) != 0);
  REQUIRE(seg->Reserve(4096, 8192).ok());
  seg->PrefaultForWrite(4096 + 100, 5000);  // Unaligned on purpose.
  std::memcpy(seg->writable_base() + 4200, "hello", 6);
  CHECK(std::string(reinterpret_cast<const char*>(seg->readonly_base() + 4200)) == "hello");
}

TEST_CASE("ShmSegment: Create rejects a zero size", "[shm]") {
  auto seg = ShmSegment::Create("lumen-test", 0);
  CHECK(seg.status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("ShmSegment: Reserve checks the range and is repeatable", "[shm]") {
  auto seg = MakeSegment();
  CHECK(seg->Reserve(0, kSize).ok());
  CHECK(seg->Reserve(0, kSize).ok());  // Already reserved.
  CHECK(seg->Reserve(kSize, 0).ok());
  CHECK(seg->Reserve(kSize - 10, 11).code() == absl::StatusCode::kOutOfRange);
  CHECK(seg->Reserve(UINT64_MAX, 2).code() == absl::StatusCode::kOutOfRange);
  // fallocate really backs the pages: the file's block count covers the range.
  struct stat st;
  REQUIRE(fstat(seg->fd(), &st) == 0);
  CHECK(static_cast<uint64_t>(st.st_blocks) * 512 >= kSize);
}

// Invariant: Reserve skips only chunks it reserved whole before, so every
// page of a range is backed afterwards however earlier reservations covered it
// (unaligned pieces, a short last chunk); PrefaultForWrite's skipping likewise
// never leaves a page unwritable.
TEST_CASE("ShmSegment: Reserve backs a range partly reserved before", "[shm]") {
  constexpr uint64_t kChunk = ShmSegment::kChunk;
  const uint64_t size = 5 * kChunk + 12345;  // a short last chunk
  auto seg = MakeSegment(size);
  auto backed = [&] {
    struct stat st;
    REQUIRE(fstat(seg->fd(), &st) == 0);
    return static_cast<uint64_t>(st.st_blocks) * 512;
  };
  REQUIRE(seg->Reserve(kChunk + 100, kChunk).ok());  // covers no chunk whole
  CHECK(backed() >= kChunk);
  CHECK(backed() < 3 * kChunk);
  REQUIRE(seg->Reserve(0, 3 * kChunk).ok());  // chunks 0-2, partly reserved already
  CHECK(backed() >= 3 * kChunk);
  CHECK(backed() < 4 * kChunk);
  REQUIRE(seg->Reserve(kChunk / 2, kChunk).ok());  // all reserved: nothing to do
  CHECK(backed() < 4 * kChunk);
  REQUIRE(seg->Reserve(2 * kChunk + 5, size - 2 * kChunk - 5).ok());  // up to the short end
  CHECK(backed() >= size);
  // Writes anywhere land, with ranges populated before or not.
  seg->PrefaultForWrite(kChunk - 1, kChunk + 2);
  seg->PrefaultForWrite(0, size);
  seg->PrefaultForWrite(3 * kChunk + 7, size);  // clipped to the segment
  for (uint64_t at : {uint64_t{0}, kChunk - 1, 2 * kChunk, 4 * kChunk + 3, size - 1}) {
    seg->writable_base()[at] = static_cast<uint8_t>(at % 251 + 1);
    CHECK(seg->readonly_base()[at] == static_cast<uint8_t>(at % 251 + 1));
  }
}

TEST_CASE("ShmSegment: Attach to a dup'd fd sees the same bytes", "[shm]") {
  auto seg = MakeSegment();
  std::memcpy(seg->writable_base() + 10, "abc", 4);
  auto other = ShmSegment::Attach(dup(seg->fd()), kSize);
  REQUIRE(other.ok());
  CHECK(std::string(reinterpret_cast<const char*>((*other)->readonly_base() + 10)) == "abc");
  // And the other way round.
  std::memcpy((*other)->writable_base() + 100, "xyz", 4);
  CHECK(std::string(reinterpret_cast<const char*>(seg->readonly_base() + 100)) == "xyz");
}

TEST_CASE("ShmSegment: Attach rejects a file that is too small", "[shm]") {
  auto seg = MakeSegment(4096);
  auto other = ShmSegment::Attach(dup(seg->fd()), 8192);
  CHECK(other.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ShmSegment::Attach(-1, 4096).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("ShmSegment: a forked child attaches the inherited fd and writes", "[shm]") {
  auto seg = MakeSegment();
  const int fd = seg->fd();
  int status = RunInChild([fd] {
    auto child = ShmSegment::Attach(dup(fd), kSize);
    if (!child.ok()) _exit(2);
    std::memcpy((*child)->writable_base() + 512, "from child", 11);
  });
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(std::string(reinterpret_cast<const char*>(seg->readonly_base() + 512)) == "from child");
}

TEST_CASE("ShmSegment: the read-only view really is read-only", "[shm]") {
  auto seg = MakeSegment();
  const uint8_t* ro = seg->readonly_base();
  int status = RunInChild([ro] {
    // Die of the signal itself, not through a sanitizer's handler.
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    *const_cast<volatile uint8_t*>(ro + 64) = 1;
    _exit(3);  // Only reached if the write succeeded.
  });
  INFO("child status " << status);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGSEGV);
  CHECK(ro[64] == 0);
}

TEST_CASE("fd passing: a memfd sent over a socketpair maps the same bytes", "[shm][fd]") {
  auto seg = MakeSegment();
  std::memcpy(seg->writable_base() + 1000, "shared bytes", 13);

  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  const std::string payload = "segment:1048576";
  REQUIRE(SendWithFd(sv[0], payload.data(), payload.size(), seg->fd()).ok());

  char buf[64];
  size_t got = 0;
  auto fd = RecvWithFd(sv[1], buf, sizeof(buf), &got);
  REQUIRE(fd.ok());
  CHECK(std::string(buf, got) == payload);
  CHECK(*fd != seg->fd());
  CHECK((fcntl(*fd, F_GETFD) & FD_CLOEXEC) != 0);
  auto received = ShmSegment::Attach(*fd, kSize);
  REQUIRE(received.ok());
  CHECK(std::string(reinterpret_cast<const char*>((*received)->readonly_base() + 1000)) ==
        "shared bytes");
  (*received)->writable_base()[2000] = 42;
  CHECK(seg->readonly_base()[2000] == 42);

  // A message without an fd, then EOF.
  REQUIRE(write(sv[0], "x", 1) == 1);
  auto none = RecvWithFd(sv[1], buf, sizeof(buf), &got);
  CHECK(none.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(got == 1);
  close(sv[0]);
  auto eof = RecvWithFd(sv[1], buf, sizeof(buf), &got);
  CHECK(eof.status().code() == absl::StatusCode::kUnavailable);
  CHECK(got == 0);
  // Sending to a closed peer fails without SIGPIPE.
  int sv2[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv2) == 0);
  close(sv2[1]);
  CHECK(SendWithFd(sv2[0], "a", 1, seg->fd()).code() == absl::StatusCode::kUnavailable);
  close(sv2[0]);
  close(sv[1]);
}

TEST_CASE("fd passing: a large payload on a non-blocking socket arrives whole", "[shm][fd]") {
  auto seg = MakeSegment(4096);
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  int small = 4096;
  REQUIRE(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) == 0);
  REQUIRE(fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK) == 0);

  std::string payload(1 << 20, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7);
  // The reader runs in a child so that the sender must wait for room.
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(sv[0]);
    std::string in(payload.size(), '\0');
    size_t got = 0;
    auto fd = RecvWithFd(sv[1], in.data(), in.size(), &got);
    if (!fd.ok()) _exit(2);
    close(*fd);
    while (got < in.size()) {
      ssize_t n = read(sv[1], in.data() + got, in.size() - got);
      if (n <= 0) _exit(3);
      got += static_cast<size_t>(n);
    }
    _exit(in == payload ? 0 : 4);
  }
  close(sv[1]);
  CHECK(SendWithFd(sv[0], payload.data(), payload.size(), seg->fd()).ok());
  close(sv[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("fd passing: TrySendWithFd never waits, and says how much the socket took", "[shm][fd]") {
  // Invariant: one non-blocking call: a socket with room takes some bytes and
  // the fd with them; a full socket takes nothing and the call returns at once
  // with Unavailable instead of waiting for the reader.
  auto seg = MakeSegment(4096);
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  int small = 4096;
  REQUIRE(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) == 0);
  std::string payload(1 << 20, 'p');  // far more than the socket holds

  auto sent = TrySendWithFd(sv[0], payload.data(), payload.size(), seg->fd());
  REQUIRE(sent.ok());
  CHECK(*sent > 0);
  CHECK(*sent < payload.size());
  // Full now: nothing more goes, and the call does not block.
  auto full = TrySendWithFd(sv[0], payload.data(), payload.size(), seg->fd());
  CHECK(full.status().code() == absl::StatusCode::kUnavailable);

  std::string in(*sent, '\0');
  size_t got = 0;
  auto fd = RecvWithFd(sv[1], in.data(), in.size(), &got);
  REQUIRE(fd.ok());
  CHECK(got > 0);
  CHECK(in.substr(0, got) == payload.substr(0, got));
  close(*fd);
  CHECK(TrySendWithFd(sv[0], "", 0, seg->fd()).status().code() ==
        absl::StatusCode::kInvalidArgument);
  close(sv[0]);
  close(sv[1]);
}

}  // namespace
}  // namespace lumen::objectstore
