// CallSites: where an object was created, as `lumen memory` shows it ("Put at
// train.cc:42", "task Plus"), interned so that each object's entry holds one
// pointer instead of a string.
//
//   const std::string* site = CallSites::Intern(absl::StrCat("task ", name));
//   entry.call_site = site;   // lives as long as the process
//
// Thread-safe. The set only grows: it holds one string per distinct call site
// (Put source line or remote function), which a program has a bounded number of.
#pragma once

#include <source_location>
#include <string>
#include <string_view>

namespace lumen::runtime {

class CallSites {
 public:
  // The one copy of `site`; valid until the process exits.
  static const std::string* Intern(std::string_view site);
  // "Put at FILE:LINE" (the file's last path component), interned; nullptr
  // for an empty location (no file name).
  static const std::string* OfPut(const std::source_location& where);
};

}  // namespace lumen::runtime
