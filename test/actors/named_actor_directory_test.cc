// NamedActorDirectory on its own: no processes, no sockets.
#include "lumen/actors/named_actor_directory.h"

#include <string>

#include <catch2/catch.hpp>

namespace lumen::actors {
namespace {

NamedActorEntry Actor(const std::string& id) { return {id, "owner:1", ""}; }

TEST_CASE("Names are unique per namespace and found again") {
  // Invariant: a (namespace, name) pair names at most one actor.
  NamedActorDirectory dir({.max_named_actors = 10, .max_name_bytes = 16});
  REQUIRE(dir.Register("", "counter", Actor("id1")).ok());
  auto taken = dir.Register("", "counter", Actor("id2"));
  CHECK(taken.code() == absl::StatusCode::kAlreadyExists);
  CHECK(std::string(taken.message()) == "an actor named 'counter' already exists");
  CHECK(dir.Register("other", "counter", Actor("id2")).ok());  // another namespace

  const NamedActorEntry* found = dir.Lookup("", "counter");
  REQUIRE(found != nullptr);
  CHECK(found->actor_id == "id1");
  CHECK(found->owner_address == "owner:1");
  CHECK(dir.Lookup("", "missing") == nullptr);
  CHECK(dir.Lookup("other", "counter")->actor_id == "id2");
  CHECK(dir.size() == 2);
}

TEST_CASE("Only the actor a name belongs to may update or unregister it") {
  // Invariant: a late unregister or address update from an actor whose name
  // was taken over by a newer actor leaves the newer entry alone.
  NamedActorDirectory dir({});
  REQUIRE(dir.Register("", "svc", Actor("old")).ok());
  CHECK(dir.Unregister("", "svc", "old"));
  REQUIRE(dir.Register("", "svc", Actor("new")).ok());

  CHECK_FALSE(dir.Unregister("", "svc", "old"));
  CHECK_FALSE(dir.UpdateAddress("", "svc", "old", "10.0.0.1:1"));
  CHECK(dir.Lookup("", "svc")->address.empty());

  CHECK(dir.UpdateAddress("", "svc", "new", "10.0.0.2:2"));
  CHECK(dir.Lookup("", "svc")->address == "10.0.0.2:2");
  CHECK_FALSE(dir.UpdateAddress("", "absent", "new", "x"));
  CHECK(dir.Unregister("", "svc", "new"));
  CHECK(dir.size() == 0);
}

TEST_CASE("Actors are found by id until their name is unregistered") {
  // Invariant: FindById answers from the names the actor still holds, and
  // nothing once the last is unregistered (the id index follows the names).
  NamedActorDirectory dir({});
  CHECK_FALSE(dir.FindById("id").has_value());
  REQUIRE(dir.Register("", "a", Actor("id")).ok());
  REQUIRE(dir.Register("", "b", Actor("id")).ok());
  auto found = dir.FindById("id");
  REQUIRE(found.has_value());
  CHECK(found->name == "b");  // the last in name order
  CHECK(found->entry.actor_id == "id");
  CHECK(dir.Unregister("", "b", "id"));
  CHECK(dir.FindById("id")->name == "a");
  CHECK(dir.Unregister("", "a", "id"));
  CHECK_FALSE(dir.FindById("id").has_value());
}

TEST_CASE("The directory refuses names over its limits, naming them") {
  // Invariant: the directory never holds more than max_named_actors names nor
  // a name longer than max_name_bytes.
  NamedActorDirectory dir({.max_named_actors = 2, .max_name_bytes = 4});
  auto long_name = dir.Register("", "abcde", Actor("x"));
  CHECK(long_name.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(long_name.message()) == "an actor name of 5 bytes is over the limit of 4 bytes");
  REQUIRE(dir.Register("", "a", Actor("1")).ok());
  REQUIRE(dir.Register("n", "b", Actor("2")).ok());
  auto full = dir.Register("", "c", Actor("3"));
  CHECK(full.code() == absl::StatusCode::kResourceExhausted);
  CHECK(std::string(full.message()).find("LUMEN_MAX_NAMED_ACTORS") != std::string::npos);
  CHECK(dir.size() == 2);
  CHECK(dir.Unregister("", "a", "1"));
  CHECK(dir.Register("", "c", Actor("3")).ok());
}

}  // namespace
}  // namespace lumen::actors
