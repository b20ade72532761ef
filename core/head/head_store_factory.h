// MakeHeadStore: the HeadStore that a head's options name (HeadOptions::
// persistence, external_storage, state_dir), or nullptr when persistence is
// off.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<HeadStore> store, MakeHeadStore(options));
//
// Errors: InvalidArgument (an unknown persistence mode or storage URL),
// FailedPrecondition (a Redis URL in a build without hiredis, or a log with no
// directory to live in).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "core/head/head_store.h"
#include "lumen/head/head_service.h"

namespace lumen::head {

[[nodiscard]] absl::StatusOr<std::unique_ptr<HeadStore>> MakeHeadStore(const HeadOptions& options);

}  // namespace lumen::head
