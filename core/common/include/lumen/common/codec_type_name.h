// Readable type names for codec messages ("object holds std::vector<int> but
// was read as std::string"): lumen::codec::Demangle and DemangledTypeName<T>().
//
//   std::string name = lumen::codec::DemangledTypeName<std::map<std::string, int>>();
//   // "std::map<std::string, int>"
//
// Stateless: safe to call from any thread.
#pragma once

#include <cxxabi.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <typeinfo>

namespace lumen::codec {

// ---------------------------------------------------------------------------
// Type names.
// ---------------------------------------------------------------------------

// A readable name for a mangled (typeid) name: demangled, with default
// template arguments (std::allocator, std::less, std::hash, std::equal_to,
// std::char_traits) dropped and std::basic_string<char> shown as std::string,
// e.g. "std::map<std::string, std::vector<int>>". Best effort, for messages;
// returns the input unchanged if it cannot be demangled.
inline std::string Demangle(const char* mangled) {
  if (mangled == nullptr) return "";
  if (*mangled == '*') ++mangled;  // GCC marks names of internal-linkage types
  int status = 0;
  char* raw = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  if (status != 0 || raw == nullptr) {
    std::free(raw);
    return mangled;
  }
  std::string s(raw);
  std::free(raw);

  auto replace_all = [&s](std::string_view from, std::string_view to) {
    for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
      s.replace(pos, from.size(), to);
    }
  };
  replace_all("std::__cxx11::", "std::");
  for (std::string_view arg : {", std::char_traits<", ", std::allocator<", ", std::less<",
                               ", std::hash<", ", std::equal_to<"}) {
    size_t search = 0;
    while (true) {
      size_t pos = s.find(arg, search);
      if (pos == std::string::npos) break;
      size_t i = pos + arg.size();
      int depth = 1;
      for (; i < s.size() && depth > 0; ++i) {
        if (s[i] == '<') ++depth;
        if (s[i] == '>') --depth;
      }
      if (depth != 0) break;
      // Only a trailing (defaulted) argument: what follows must close the list.
      size_t next = s.find_first_not_of(' ', i);
      if (next == std::string::npos || (s[next] != '>' && s[next] != ',')) {
        search = pos + 1;
        continue;
      }
      s.erase(pos, i - pos);
      search = pos;
    }
  }
  replace_all(" >", ">");
  replace_all("std::basic_string<char>", "std::string");
  return s;
}

template <class T>
std::string DemangledTypeName() {
  return Demangle(typeid(T).name());
}

}  // namespace lumen::codec
