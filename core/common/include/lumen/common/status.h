// Status helpers used across the runtime: RETURN_IF_ERROR / ASSIGN_OR_RETURN.
//
//   absl::StatusOr<int> Parse(std::string_view s);
//   absl::Status Use() {
//     ASSIGN_OR_RETURN(int n, Parse("12"));
//     RETURN_IF_ERROR(Check(n));
//     return absl::OkStatus();
//   }
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LUMEN_STATUS_CONCAT_INNER(a, b) a##b
#define LUMEN_STATUS_CONCAT(a, b) LUMEN_STATUS_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                 \
  do {                                        \
    ::absl::Status lumen_status_ = (expr);    \
    if (!lumen_status_.ok()) return lumen_status_; \
  } while (0)

#define LUMEN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(*tmp)

#define ASSIGN_OR_RETURN(lhs, expr) \
  LUMEN_ASSIGN_OR_RETURN_IMPL(LUMEN_STATUS_CONCAT(lumen_statusor_, __LINE__), lhs, expr)
