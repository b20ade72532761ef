// NamedActorDirectory: the cluster's table of named actors, kept by the head.
// A name is unique within its namespace; an entry maps it to the actor's id,
// its owner's address and (for detached actors, whose owner may be gone) the
// actor process's own address.
//
//   lumen::actors::NamedActorDirectory dir({.max_named_actors = 100000, .max_name_bytes = 1024});
//   RETURN_IF_ERROR(dir.Register("", "counter", {.actor_id = id, .owner_address = owner}));
//   const NamedActorEntry* e = dir.Lookup("", "counter");        // nullptr: no such name
//   dir.UpdateAddress("", "counter", id, "10.0.0.2:4000");       // only for the same actor
//   dir.Unregister("", "counter", id);                           // a newer actor's name stays
//
// Pure bookkeeping, no I/O. Not thread-safe: owned by one thread (the head's
// event loop), checked in debug builds.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "lumen/common/thread_checker.h"

namespace lumen::actors {

// What the directory may hold (the head fills it from HeadLimits).
struct NamedActorLimits {
  size_t max_named_actors = 100000;  // over all namespaces (LUMEN_MAX_NAMED_ACTORS)
  size_t max_name_bytes = 1024;
};

struct NamedActorEntry {
  std::string actor_id;       // the actor id's bytes
  std::string owner_address;  // who created it (answers its calls' ownership questions)
  std::string address;        // detached actors: the actor process's address ("" until known)
};

// A name found by actor id.
struct NamedActorRef {
  std::string ns;
  std::string name;
  NamedActorEntry entry;
};

class NamedActorDirectory {
 public:
  explicit NamedActorDirectory(NamedActorLimits limits) : limits_(limits) {}

  // Adds `name` in namespace `ns`. Errors (checked in this order, each message
  // names the actor or the limit): AlreadyExists (the name is taken),
  // InvalidArgument (the name is longer than max_name_bytes), ResourceExhausted
  // (the directory holds max_named_actors).
  [[nodiscard]] absl::Status Register(const std::string& ns, const std::string& name,
                                      NamedActorEntry entry);
  // The entry, or nullptr. The pointer lives until the next mutating call.
  const NamedActorEntry* Lookup(const std::string& ns, const std::string& name) const;
  // A name registered for `actor_id` (the last in (namespace, name) order when
  // it holds several), or nullopt.
  std::optional<NamedActorRef> FindById(const std::string& actor_id) const;
  // Records a detached actor's address; false (nothing changes) when the name
  // is absent or now belongs to another actor.
  bool UpdateAddress(const std::string& ns, const std::string& name, const std::string& actor_id,
                     const std::string& address);
  // Removes the name if it still belongs to `actor_id` (a restarted owner's
  // late unregister must not remove a newer actor's name); false otherwise.
  bool Unregister(const std::string& ns, const std::string& name, const std::string& actor_id);

  size_t size() const { return entries_.size(); }
  const NamedActorLimits& limits() const { return limits_; }

 private:
  using Key = std::pair<std::string, std::string>;  // (namespace, name)
  // The entry at `key` if it is `actor_id`'s, else entries_.end().
  std::map<Key, NamedActorEntry>::iterator FindOwned(const Key& key, const std::string& actor_id);

  NamedActorLimits limits_;
  std::map<Key, NamedActorEntry> entries_;
  // actor id -> its names, for FindById without a scan.
  std::multimap<std::string, Key> by_id_;
  ThreadChecker thread_;
};

}  // namespace lumen::actors
