#include "lumen/actors/named_actor_directory.h"

#include "absl/strings/str_cat.h"

namespace lumen::actors {

absl::Status NamedActorDirectory::Register(const std::string& ns, const std::string& name,
                                           NamedActorEntry entry) {
  thread_.Check("NamedActorDirectory");
  Key key{ns, name};
  if (entries_.contains(key)) {
    return absl::AlreadyExistsError(absl::StrCat("an actor named '", name, "' already exists"));
  }
  if (name.size() > limits_.max_name_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("an actor name of ", name.size(),
                                                   " bytes is over the limit of ",
                                                   limits_.max_name_bytes, " bytes"));
  }
  if (entries_.size() >= limits_.max_named_actors) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the cluster already has ", entries_.size(),
                     " named actors, the limit (LUMEN_MAX_NAMED_ACTORS)"));
  }
  by_id_.emplace(entry.actor_id, key);
  entries_.emplace(std::move(key), std::move(entry));
  return absl::OkStatus();
}

const NamedActorEntry* NamedActorDirectory::Lookup(const std::string& ns,
                                                   const std::string& name) const {
  thread_.Check("NamedActorDirectory");
  auto it = entries_.find(Key{ns, name});
  return it == entries_.end() ? nullptr : &it->second;
}

std::optional<NamedActorRef> NamedActorDirectory::FindById(const std::string& actor_id) const {
  thread_.Check("NamedActorDirectory");
  auto [begin, end] = by_id_.equal_range(actor_id);
  const Key* last = nullptr;
  for (auto it = begin; it != end; ++it) {
    if (last == nullptr || *last < it->second) last = &it->second;
  }
  if (last == nullptr) return std::nullopt;
  return NamedActorRef{last->first, last->second, entries_.at(*last)};
}

bool NamedActorDirectory::UpdateAddress(const std::string& ns, const std::string& name,
                                        const std::string& actor_id, const std::string& address) {
  thread_.Check("NamedActorDirectory");
  auto it = FindOwned(Key{ns, name}, actor_id);
  if (it == entries_.end()) return false;
  it->second.address = address;
  return true;
}

bool NamedActorDirectory::Unregister(const std::string& ns, const std::string& name,
                                     const std::string& actor_id) {
  thread_.Check("NamedActorDirectory");
  Key key{ns, name};
  auto it = FindOwned(key, actor_id);
  if (it == entries_.end()) return false;
  auto [begin, end] = by_id_.equal_range(actor_id);
  for (auto bit = begin; bit != end; ++bit) {
    if (bit->second == key) {
      by_id_.erase(bit);
      break;
    }
  }
  entries_.erase(it);
  return true;
}

std::map<NamedActorDirectory::Key, NamedActorEntry>::iterator NamedActorDirectory::FindOwned(
    const Key& key, const std::string& actor_id) {
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.actor_id != actor_id) return entries_.end();
  return it;
}

}  // namespace lumen::actors
