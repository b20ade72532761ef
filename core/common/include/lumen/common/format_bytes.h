// Human-readable byte counts for messages, tables and the dashboard: "512 B",
// "1.5 KiB", "2.0 GiB" (binary units, one decimal). Used by the object store's
// errors, the head's pages and the CLI, so it lives below all of them.
#pragma once

#include <cstdint>
#include <string>

namespace lumen {

std::string FormatBytes(uint64_t bytes);

}  // namespace lumen
