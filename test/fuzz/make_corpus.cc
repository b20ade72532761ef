// Writes the fuzzers' seed corpus: valid frames as Lumen's clients send them.
//
//   make_fuzz_corpus DIR     # writes DIR/frame_fuzzer/* and DIR/head_dispatch_fuzzer/*
//
// frame_fuzzer seeds are frame streams; head_dispatch_fuzzer seeds start with
// its flags byte (1: the harness sends a hello first; 0: the seed holds one).
// scripts/fuzz --corpus regenerates test/fuzz/corpus/ with it; the output is
// deterministic (fixed ids), so a regenerated corpus differs only when the
// messages do.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "lumen/common/connection.h"
#include "lumen/common/head_client.h"

namespace {

using Builder = lumen::proto::Envelope::Builder;

std::string Frame(const std::function<void(Builder)>& fill) {
  lumen::OutMessage out;
  fill(out.Init());
  std::string frame;
  lumen::AppendFrame(out.builder(), &frame);
  return frame;
}

capnp::Data::Reader Bytes(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}

const std::string kNode(28, 'n');    // a node id's bytes
const std::string kJob(4, 'j');      // a job id's bytes
const std::string kGroup(18, 'g');   // a placement group id's bytes
const std::string kActor(16, 'a');   // an actor id's bytes

void Resources(capnp::List<lumen::proto::Resource>::Builder list) {
  list[0].setName("CPU");
  list[0].setQuantity(2);
  if (list.size() > 1) {
    list[1].setName("memory");
    list[1].setQuantity(1 << 30);
  }
}

void Stats(lumen::proto::NodeStats::Builder stats) {
  stats.setNodeId(Bytes(kNode));
  stats.setAddress("127.0.0.1:4000;/tmp/lumen-session/sockets/node.sock");
  stats.setHostname("host");
  stats.setPid(42);
  stats.setAlive(true);
  Resources(stats.initTotal(2));
  Resources(stats.initAvailable(2));
  stats.setStoreCapacity(64 << 20);
  stats.setSessionDir("/tmp/lumen-session");
  stats.setTransferAddress("127.0.0.1:4001");
  auto bundle = stats.initBundles(1)[0];
  bundle.setGroupId(Bytes(kGroup));
  bundle.setIndex(0);
  Resources(bundle.initResources(1));
  stats.initDrivers(1).set(0, Bytes(kJob));
}

// Named frames: what each client sends the head.
std::vector<std::pair<std::string, std::string>> HeadFrames() {
  std::vector<std::pair<std::string, std::string>> f;
  f.emplace_back("hello_driver", Frame([](Builder e) {
    auto h = lumen::runtime::InitHello(e, lumen::proto::Role::DRIVER);
    h.setJobId(Bytes(kJob));
    h.setExePath("/bin/true");
  }));
  f.emplace_back("hello_cli_token", Frame([](Builder e) {
    lumen::runtime::InitHello(e, lumen::proto::Role::CLI).setToken("not-the-token");
  }));
  f.emplace_back("get_nodes", Frame([](Builder e) { e.setRequestId(1); e.setGetNodes(); }));
  f.emplace_back("register_node", Frame([](Builder e) { Stats(e.initRegisterNode()); }));
  f.emplace_back("report_node", Frame([](Builder e) { Stats(e.initReportNode()); }));
  f.emplace_back("mark_node_dead", Frame([](Builder e) { e.setMarkNodeDead(Bytes(kNode)); }));
  f.emplace_back("job_ended", Frame([](Builder e) { e.setJobEnded(Bytes(kJob)); }));
  f.emplace_back("kv_put", Frame([](Builder e) {
    e.setRequestId(2);
    auto kv = e.initKvPut();
    kv.setKey("key");
    kv.setValue(Bytes("value"));
  }));
  f.emplace_back("kv_get", Frame([](Builder e) { e.setRequestId(3); e.setKvGet("key"); }));
  for (auto op : {lumen::proto::KvOp::PUT, lumen::proto::KvOp::GET, lumen::proto::KvOp::DELETE,
                  lumen::proto::KvOp::DELETE_PREFIX, lumen::proto::KvOp::EXISTS,
                  lumen::proto::KvOp::KEYS, lumen::proto::KvOp::WAIT}) {
    f.emplace_back("kv_op_" + std::to_string(static_cast<int>(op)), Frame([op](Builder e) {
      e.setRequestId(4);
      auto kv = e.initKv();
      kv.setOp(op);
      kv.setNamespace("ns");
      kv.setKey("key");
      kv.setValue(Bytes("value"));
      kv.setTimeoutMs(1);
    }));
  }
  f.emplace_back("register_actor_name", Frame([](Builder e) {
    e.setRequestId(5);
    auto n = e.initRegisterActorName();
    n.setName("actor");
    n.setActorId(Bytes(kActor));
    n.setOwnerAddress("127.0.0.1:5000");
  }));
  f.emplace_back("lookup_actor_name", Frame([](Builder e) { e.setRequestId(6); e.setLookupActorName("actor"); }));
  f.emplace_back("update_actor_address", Frame([](Builder e) {
    auto n = e.initUpdateActorAddress();
    n.setName("actor");
    n.setActorId(Bytes(kActor));
    n.setAddress("127.0.0.1:5001");
  }));
  f.emplace_back("lookup_actor_by_id", Frame([](Builder e) { e.setRequestId(7); e.setLookupActorById(Bytes(kActor)); }));
  f.emplace_back("unregister_actor_name", Frame([](Builder e) {
    auto n = e.initUnregisterActorName();
    n.setName("actor");
    n.setActorId(Bytes(kActor));
  }));
  f.emplace_back("create_placement_group", Frame([](Builder e) {
    e.setRequestId(8);
    auto spec = e.initCreatePlacementGroup();
    spec.setGroupId(Bytes(kGroup));
    spec.setName("group");
    spec.setStrategy(lumen::proto::PlacementStrategy::STRICT_SPREAD);
    auto bundles = spec.initBundles(2);
    for (unsigned i = 0; i < 2; ++i) {
      bundles[i].setGroupId(Bytes(kGroup));
      bundles[i].setIndex(static_cast<int32_t>(i));
      Resources(bundles[i].initResources(1));
    }
    spec.setJobId(Bytes(kJob));
  }));
  f.emplace_back("wait_placement_group", Frame([](Builder e) {
    e.setRequestId(9);
    auto w = e.initWaitPlacementGroup();
    w.setGroupId(Bytes(kGroup));
    w.setTimeoutMs(1);
  }));
  f.emplace_back("list_placement_groups", Frame([](Builder e) { e.setRequestId(10); e.setListPlacementGroups(); }));
  f.emplace_back("remove_placement_group", Frame([](Builder e) { e.setRequestId(11); e.setRemovePlacementGroup(Bytes(kGroup)); }));
  f.emplace_back("bundle_reply", Frame([](Builder e) {
    auto r = e.initBundleReply();
    (void)r;
  }));
  return f;
}

void Write(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " DIR\n";
    return 2;
  }
  std::filesystem::path root = argv[1];
  auto frames = HeadFrames();
  const std::string& hello = frames[0].second;
  for (const char* target : {"frame_fuzzer", "head_dispatch_fuzzer"}) {
    std::filesystem::create_directories(root / target);
  }
  std::string all;
  std::string session;  // a node's and a driver's life, in one stream
  for (const auto& [name, frame] : frames) {
    Write(root / "frame_fuzzer" / name, frame);
    if (name.rfind("hello", 0) == 0) {
      Write(root / "head_dispatch_fuzzer" / name, std::string(1, '\0') + frame);
    } else {
      Write(root / "head_dispatch_fuzzer" / name, std::string(1, '\1') + frame);
      session += frame;
    }
    all += frame;
  }
  Write(root / "frame_fuzzer" / "all", all);
  Write(root / "head_dispatch_fuzzer" / "session", std::string(1, '\0') + hello + session);
  // A regression seed (UBSan: a wait timeout near 2^64 overflowed its
  // conversion to nanoseconds): a pending group, then a wait for 2^64 - 1 ms.
  std::string create_group;
  for (const auto& [name, frame] : frames)
    if (name == "create_placement_group") create_group = frame;
  Write(root / "head_dispatch_fuzzer" / "regression-pg-wait-timeout-overflow",
        std::string(1, '\1') + create_group + Frame([](Builder e) {
          e.setRequestId(12);
          auto w = e.initWaitPlacementGroup();
          w.setGroupId(Bytes(kGroup));
          w.setTimeoutMs(~uint64_t{0});
        }));
  std::cout << "wrote " << frames.size() + 1 << " seeds per target under " << root
            << " and a regression seed for head_dispatch_fuzzer\n";
  return 0;
}
