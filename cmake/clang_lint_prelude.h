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
