#include "lumen/common/format_bytes.h"

#include <cstdio>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace lumen {

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  char out[32];
  std::snprintf(out, sizeof(out), "%.1f %s", value, kUnits[unit]);
  return out;
}

}  // namespace lumen
