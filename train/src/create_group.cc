// CreateGroup: a collective group declared from the driver over actor handles,
// as Ray's create_collective_group. Each actor runs InitGroup through a method
// registered for every class, with ranks in list order.
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "lumen/train/collective.h"

namespace lumen::collective {
namespace internal {
namespace {

std::string RandomHex(size_t bytes) {
  std::random_device rd;
  std::string out;
  static const char* kHex = "0123456789abcdef";
  for (size_t i = 0; i < bytes; ++i) {
    unsigned v = rd() & 0xff;
    out += kHex[v >> 4];
    out += kHex[v & 15];
  }
  return out;
}

// Runs InitGroup in an actor's process: registered as a method of every class
// (it ignores the instance), so CreateGroup works over any actor handle.
std::string InitGroupInActor(void* /*instance*/, const std::vector<lumen::internal::ObjectBytes>& args) {
  auto params = lumen::internal::DecodeParams<
      std::tuple<int, int, int, std::string, int64_t, std::string, bool>>(args, std::make_index_sequence<7>());
  GroupOptions options;
  options.world_size = std::get<0>(params);
  options.rank = std::get<1>(params);
  options.backend = static_cast<Backend>(std::get<2>(params));
  options.name = std::get<3>(params);
  options.timeout = std::chrono::milliseconds(std::get<4>(params));
  options.rendezvous_id = std::get<5>(params);
  options.verify_sizes = std::get<6>(params);
  InitGroup(options);
  return codec::EncodeValue<uint8_t>(0);
}

constexpr char kInitGroupMethod[] = "lumen::collective::InitGroupInActor";

const bool kRegistered = [] {
  lumen::internal::RemoteFunction entry;
  entry.kind = lumen::internal::RemoteFunction::Kind::kMethod;
  entry.call = InitGroupInActor;
  return lumen::internal::RegisterFunction(
      kInitGroupMethod, lumen::internal::PointerKey(&InitGroupInActor), std::move(entry));
}();

}  // namespace

void CreateGroup(const std::vector<std::shared_ptr<lumen::internal::RefHandle>>& actors,
                 const CreateGroupOptions& options) {
  (void)kRegistered;
  if (actors.empty()) throw CollectiveError("CreateGroup: no actors");
  std::string id = "c" + RandomHex(8);
  int world = static_cast<int>(actors.size());
  std::vector<lumen::ObjectRef<uint8_t>> results;
  for (int rank = 0; rank < world; ++rank) {
    if (!actors[rank]) throw CollectiveError("CreateGroup: actor " + std::to_string(rank) + " is empty");
    auto args = lumen::internal::EncodeArguments<
        std::tuple<int, int, int, std::string, int64_t, std::string, bool>>(
        world, rank, static_cast<int>(options.backend), options.name,
        static_cast<int64_t>(options.timeout.count()), id, options.verify_sizes);
    results.emplace_back(lumen::internal::SubmitActorTask(actors[rank], kInitGroupMethod, std::move(args)));
  }
  std::string errors;
  for (int rank = 0; rank < world; ++rank) {
    try {
      lumen::Get(results[rank]);
    } catch (const lumen::Error& e) {
      errors += (errors.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank) + ": " + e.what();
    }
  }
  if (!errors.empty()) {
    throw CollectiveError("CreateGroup of collective group '" + options.name + "' failed: " + errors);
  }
}

}  // namespace internal
}  // namespace lumen::collective
