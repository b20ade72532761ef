// Force-included (clang's -include) into every C++ file of the clang builds:
// the lint build (scripts/lint) and the fuzz build (scripts/fuzz), and only there.
//
// Why: Cap'n Proto 0.9 (Debian 12) deletes capnp::word's copy constructor when
// compiled by clang (capnp/common.h: `#if __GNUC__ < 8 || __clang__`), so
// std::vector<capnp::word>, which Lumen uses for frames, does not compile with
// clang 14 + libstdc++ 12. Here KJ_DISALLOW_COPY deletes nothing, as capnp
// already does for GCC, which builds the real binaries: the clang builds then
// compile the same code.
#pragma once

#ifdef __cplusplus
#include <kj/common.h>
#undef KJ_DISALLOW_COPY
#define KJ_DISALLOW_COPY(classname) static_assert(true, "KJ_DISALLOW_COPY off for the lint")
#endif

// Why: libstdc++ 12's <source_location> defines std::source_location only
// where the compiler has __builtin_source_location (clang 15 and later), so
// under clang 14 every file that includes lumen.h (lumen::Put's call site)
// failed to compile in the lint build and went unanalysed. Here is a stand-in
// with the same interface, from the builtins clang 14 has; <source_location>,
// included later, then defines nothing (current() is constexpr, not
// consteval: clang 14 rejects a consteval call in a default argument). The
// lint only analyses, it never runs this.
#if defined(__cplusplus) && defined(__clang__) && !__has_builtin(__builtin_source_location)
namespace std {
struct source_location {
  static constexpr source_location current(const char* file = __builtin_FILE(),
                                           const char* function = __builtin_FUNCTION(),
                                           unsigned line = __builtin_LINE(),
                                           unsigned column = __builtin_COLUMN()) noexcept {
    source_location here;
    here.file_ = file;
    here.function_ = function;
    here.line_ = line;
    here.column_ = column;
    return here;
  }
  constexpr source_location() noexcept = default;
  constexpr unsigned line() const noexcept { return line_; }
  constexpr unsigned column() const noexcept { return column_; }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  unsigned line_ = 0;
  unsigned column_ = 0;
};
}  // namespace std
#endif
