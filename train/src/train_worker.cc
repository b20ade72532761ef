#include "train_worker.h"

#include <unistd.h>

#include "worker_session.h"

namespace lumen::train::internal {

TrainWorker* TrainWorker::Create(WorkerSetup setup) { return new TrainWorker(std::move(setup)); }

int TrainWorker::Pid() { return static_cast<int>(::getpid()); }

int TrainWorker::Run(std::string loop_name) {
  const lumen::internal::RemoteFunction* loop = lumen::internal::FindRemoteFunction(loop_name);
  if (loop == nullptr || loop->kind != lumen::internal::RemoteFunction::Kind::kFunction) {
    throw Error("train loop \"" + loop_name + "\" is not registered in the worker");
  }
  auto session = std::make_shared<WorkerSession>(setup_);
  const uint64_t id = RegisterSession(session);
  struct Cleanup {
    WorkerSession& session;
    uint64_t id;
    ~Cleanup() {
      session.LeaveGroup();
      UnregisterSession(id);
    }
  } cleanup{*session, id};
  session->JoinGroup();
  // The loop takes its TrainContext as a registered function takes any
  // argument: decoded from bytes (the session's number, see Codec<TrainContext>).
  std::string encoded = codec::EncodeValue(TrainContext(session));
  loop->invoke({lumen::internal::ObjectBytes{encoded, nullptr}});
  return setup_.world_rank;
}

}  // namespace lumen::train::internal

LUMEN_REMOTE(lumen::train::internal::TrainWorker::Create,
             &lumen::train::internal::TrainWorker::Run,
             &lumen::train::internal::TrainWorker::Pid);
