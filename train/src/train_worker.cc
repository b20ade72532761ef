#include "train_worker.h"

#include <unistd.h>

#include "lumen/train/trainer.h"
#include "worker_session.h"

namespace lumen::train::internal {

TrainWorker* TrainWorker::Create(WorkerSetup setup) { return new TrainWorker(std::move(setup)); }

int TrainWorker::Pid() { return static_cast<int>(::getpid()); }

int TrainWorker::Run(std::string loop_name) {
  TrainLoop loop = FindTrainLoop(loop_name);
  if (loop == nullptr) throw Error("train loop \"" + loop_name + "\" is not registered in the worker");
  auto session = std::make_shared<WorkerSession>(setup_);
  session->JoinGroup();
  struct LeaveAtExit {
    WorkerSession& session;
    ~LeaveAtExit() { session.LeaveGroup(); }
  } leave{*session};
  TrainContext ctx(session);
  loop(ctx);
  return setup_.world_rank;
}

}  // namespace lumen::train::internal

LUMEN_REMOTE(lumen::train::internal::TrainWorker::Create,
             &lumen::train::internal::TrainWorker::Run,
             &lumen::train::internal::TrainWorker::Pid);
