#include "core/head/dashboard_routes.h"

#include <memory>
#include <utility>
#include <vector>

#include "core/head/cluster_json.h"
#include "core/head/dashboard_assets.h"
#include "lumen/common/ids.h"
#include "lumen/common/proto_util.h"
#include "lumen/common/task_events.h"

namespace lumen::head {

DashboardRoutes::DashboardRoutes(Options options)
    : options_(std::move(options)),
      gatherer_({.io = options_.io, .token = options_.token, .timeout = options_.node_timeout}) {}

void DashboardRoutes::Install() {
  auto serve = [](std::string_view name) {
    return [name](const HttpRequest&) {
      const EmbeddedFile* file = FindEmbeddedFile(name);
      if (file == nullptr) return HttpResponse{404, "text/plain; charset=utf-8", "not found\n"};
      return HttpResponse{200, std::string(file->content_type), std::string(file->data)};
    };
  };
  using Access = HttpServer::Access;
  options_.http->Route("/", serve("index.html"), Access::kOpen);
  options_.http->Route("/index.html", serve("index.html"), Access::kOpen);
  options_.http->Route("/app.js", serve("app.js"), Access::kOpen);
  options_.http->Route("/style.css", serve("style.css"), Access::kOpen);
  options_.http->RouteAsync("/api/cluster", [this](const HttpRequest&, HttpServer::Respond respond) {
    AnswerCluster(std::move(respond));
  });
}

void DashboardRoutes::GatherFromLiveNodes(const std::shared_ptr<capnp::MallocMessageBuilder>& nodes,
                                          NodeStateGatherer::Done done) {
  options_.fill_nodes(*nodes);
  std::vector<NodeStateGatherer::Target> targets;
  for (auto n : nodes->getRoot<proto::ClusterView>().getNodes()) {
    if (n.getAlive()) targets.push_back({IdFrom<NodeId>(n.getNodeId()), n.getAddress().cStr()});
  }
  gatherer_.Gather(std::move(targets), std::move(done));
}

void DashboardRoutes::AnswerCluster(HttpServer::Respond respond) {
  // The node table as it is now; the nodes' answers come later.
  auto nodes = std::make_shared<capnp::MallocMessageBuilder>();
  GatherFromLiveNodes(nodes, [this, nodes, respond = std::move(respond)](
                                 std::vector<NodeAnswer> answers) {
    capnp::MallocMessageBuilder groups;
    options_.fill_groups(groups);
    ClusterSnapshot snapshot{
        .nodes = nodes->getRoot<proto::ClusterView>().getNodes().asReader(),
        .groups = groups.getRoot<proto::Envelope>().getPlacementGroups().asReader(),
        .answers = std::move(answers),
        .now_us = TaskEventRecorder::NowMicros()};
    respond(HttpResponse{200, "application/json", RenderClusterJson(snapshot)});
  });
}

}  // namespace lumen::head
