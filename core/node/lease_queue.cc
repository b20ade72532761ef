#include "core/node/lease_queue.h"

#include <queue>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace lumen::node {

// One class of equivalent requests, oldest first, and who sent them.
struct LeaseQueue::Class {
  std::deque<Entry> entries;
  absl::flat_hash_map<ClientId, size_t> clients;  // requests per client in this class
};

size_t LeaseQueue::ClassView::size() const {
  return static_cast<const Class*>(cls_)->entries.size();
}

std::optional<ClientId> LeaseQueue::ClassView::AnotherClient(ClientId client) const {
  // At most two steps: the map holds `client` at most once.
  for (const auto& [other, count] : static_cast<const Class*>(cls_)->clients) {
    if (other != client) return other;
  }
  return std::nullopt;
}

LeaseQueue::LeaseQueue() = default;
LeaseQueue::~LeaseQueue() = default;

std::string LeaseQueue::ClassKey(const LeaseRequest& request) {
  // Everything a grant depends on: the job's workers, the resources held and
  // needed, and the pool they come from.
  std::string key(request.job.Binary());
  absl::StrAppend(&key, "|", request.resources.ToString(), "|", request.placement.ToString());
  absl::StrAppend(&key, "|", request.group, "|", request.bundle_index);
  return key;
}

void LeaseQueue::Push(LeaseRequest request) {
  auto& cls = classes_[ClassKey(request)];
  if (cls == nullptr) cls = std::make_unique<Class>();
  ++cls->clients[request.client];
  ++per_job_[request.job];
  if (request.group.empty()) queued_placement_ += request.placement;
  ++size_;
  cls->entries.push_back(Entry{next_seq_++, std::move(request)});
}

void LeaseQueue::Forget(Class& cls, const LeaseRequest& request) {
  auto client = cls.clients.find(request.client);
  if (client != cls.clients.end() && --client->second == 0) cls.clients.erase(client);
  auto job = per_job_.find(request.job);
  if (job != per_job_.end() && --job->second == 0) per_job_.erase(job);
  if (request.group.empty()) queued_placement_ -= request.placement;
  --size_;
}

void LeaseQueue::Pass(const Visitor& visit) {
  in_pass_ = true;
  // The classes by the age of their front; a pushed-during-the-pass request
  // (seq >= limit) waits for the next pass.
  const uint64_t limit = next_seq_;
  using Front = std::pair<uint64_t, Class*>;
  std::priority_queue<Front, std::vector<Front>, std::greater<>> fronts;
  for (auto& [key, cls] : classes_) {
    if (!cls->entries.empty()) fronts.emplace(cls->entries.front().seq, cls.get());
  }
  while (!fronts.empty()) {
    Class* cls = fronts.top().second;
    fronts.pop();
    if (cls->entries.empty() || cls->entries.front().seq >= limit) continue;
    ++visits_;
    Verdict verdict = visit(cls->entries.front().request, ClassView(cls));
    if (verdict == Verdict::kBlocked) continue;
    Entry entry = std::move(cls->entries.front());
    cls->entries.pop_front();
    Forget(*cls, entry.request);
    if (!cls->entries.empty()) fronts.emplace(cls->entries.front().seq, cls);
  }
  // Classes left empty go (their keys would otherwise accumulate).
  for (auto it = classes_.begin(); it != classes_.end();) {
    it = it->second->entries.empty() ? classes_.erase(it) : std::next(it);
  }
  in_pass_ = false;
}

void LeaseQueue::RemoveIf(const std::function<bool(const LeaseRequest&)>& remove,
                          const std::function<void(const LeaseRequest&)>& removed) {
  for (auto it = classes_.begin(); it != classes_.end();) {
    Class& cls = *it->second;
    std::deque<Entry> kept;
    for (auto& entry : cls.entries) {
      if (!remove(entry.request)) {
        kept.push_back(std::move(entry));
        continue;
      }
      removed(entry.request);
      Forget(cls, entry.request);
    }
    cls.entries.swap(kept);
    it = cls.entries.empty() && !in_pass_ ? classes_.erase(it) : std::next(it);
  }
}

void LeaseQueue::ForEachClass(
    const std::function<void(const LeaseRequest& front, size_t size)>& visit) const {
  for (const auto& [key, cls] : classes_) {
    if (!cls->entries.empty()) visit(cls->entries.front().request, cls->entries.size());
  }
}

size_t LeaseQueue::queued_of_job(const JobId& job) const {
  auto it = per_job_.find(job);
  return it == per_job_.end() ? 0 : it->second;
}

}  // namespace lumen::node
