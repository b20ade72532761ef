#include "core/node/state_lister.h"

#include "lumen/common/proto_util.h"

namespace lumen::node {

void StateLister::List(Connection& requester, uint64_t request_id, const std::string& what,
                       std::vector<Row> own_rows) {
  io_thread_.Check("StateLister");
  auto listing = std::make_shared<Listing>();
  listing->rows = std::move(own_rows);
  listing->requester = requester.weak_from_this();
  listing->request_id = request_id;
  clients_.ForEachLocalProcess([&](Connection& process) {
    uint64_t id = next_request_id_++;
    requests_[id] = listing;
    ++listing->pending;
    OutMessage out;
    auto env = out.Init();
    env.setRequestId(id);
    env.setListState(what);
    process.Send(out.builder());
  });
  if (listing->pending == 0) {
    Finish(listing);
    return;
  }
  // A process busy in a long task answers from its io thread; one that does
  // not answer in time is left out.
  listing->timer = std::make_unique<boost::asio::steady_timer>(io_, timeout_);
  listing->timer->async_wait([this, listing](const boost::system::error_code& ec) {
    if (!ec) Finish(listing);
  });
}

void StateLister::OnRows(proto::Envelope::Reader msg) {
  io_thread_.Check("StateLister");
  auto it = requests_.find(msg.getRequestId());
  if (it == requests_.end()) return;
  auto listing = it->second;
  requests_.erase(it);
  for (auto row : msg.getStateRows()) {
    std::vector<std::pair<std::string, std::string>> fields;
    for (auto f : row.getFields()) fields.emplace_back(f.getKey().cStr(), StringOf(f.getValue()));
    listing->rows.push_back(std::move(fields));
  }
  if (--listing->pending == 0) Finish(listing);
}

void StateLister::Finish(const std::shared_ptr<Listing>& listing) {
  if (listing->done) return;
  listing->done = true;
  if (listing->timer) listing->timer->cancel();
  absl::erase_if(requests_, [&](const auto& entry) { return entry.second == listing; });
  auto conn = listing->requester.lock();
  if (!conn || conn->closed()) return;
  OutMessage out;
  auto env = out.Init();
  env.setRequestId(listing->request_id);
  auto list = env.initStateRows(listing->rows.size());
  for (size_t i = 0; i < listing->rows.size(); ++i) {
    auto fields = list[i].initFields(listing->rows[i].size() + 1);
    fields[0].setKey("NODE_DAEMON");
    fields[0].setValue(BytesOf(node_));
    for (size_t j = 0; j < listing->rows[i].size(); ++j) {
      fields[j + 1].setKey(listing->rows[i][j].first);
      fields[j + 1].setValue(BytesOf(listing->rows[i][j].second));
    }
  }
  conn->Send(out.builder());
}

}  // namespace lumen::node
