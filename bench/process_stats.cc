#include "bench/process_stats.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "lumen/common/process.h"

namespace lumen::bench {
namespace {

std::string ProcPath(pid_t pid, const char* file) {
  return (pid == 0 ? std::string("/proc/self/") : "/proc/" + std::to_string(pid) + "/") + file;
}

// The number after `key` in a "Key:   123 kB" file; 0 when absent.
long FieldKiB(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) == 0) return std::atol(line.c_str() + key.size());
  }
  return 0;
}


}  // namespace

long PeakRssKiB(pid_t pid) { return FieldKiB(ProcPath(pid, "status"), "VmHWM:"); }
long RssKiB(pid_t pid) { return FieldKiB(ProcPath(pid, "status"), "VmRSS:"); }
long RssAnonKiB(pid_t pid) { return FieldKiB(ProcPath(pid, "status"), "RssAnon:"); }
long PssKiB(pid_t pid) { return FieldKiB(ProcPath(pid, "smaps_rollup"), "Pss:"); }

bool ResetPeakRss(pid_t pid) {
  std::ofstream out(ProcPath(pid, "clear_refs"));
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

double CpuSeconds(pid_t pid) {
  std::string text = ReadProcFile(ProcPath(pid, "stat"));
  // Fields after the command name (which may hold spaces) start after ')'.
  size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  long utime = 0, stime = 0;
  // state is field 3; utime 14 and stime 15 (1-based, counting pid and comm).
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::atol(field.c_str());
    if (i == 15) stime = std::atol(field.c_str());
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code error;
  std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(tasks, error)) {
    std::ifstream in(task.path() / "children");
    pid_t child = 0;
    while (in >> child) out.push_back(child);
  }
  return out;
}

long ThreadsOf(pid_t pid) { return FieldKiB(ProcPath(pid, "status"), "Threads:"); }

long PidLimit() {
  long limit = 0;
  std::ifstream("/proc/sys/kernel/pid_max") >> limit;
  return limit;
}

long AvailableMemoryKiB() { return FieldKiB("/proc/meminfo", "MemAvailable:"); }

long OpenFileLimit() {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  return static_cast<long>(limit.rlim_cur);
}

}  // namespace lumen::bench
