#include "lumen/actors/actor_lifecycle.h"

#include <catch2/catch.hpp>

namespace lumen::actors {
namespace {

TEST_CASE("an actor is created, restarts within max_restarts, then dies", "[actors]") {
  // Invariant: a lost process restarts the actor exactly max_restarts times,
  // each restart a new generation; the next loss asks for the cause, then death.
  ActorLifecycle life(/*max_restarts=*/2);
  REQUIRE(life.state() == ActorState::kCreating);
  int g1 = life.BeginIncarnation();
  REQUIRE(life.OnCreated(g1));
  REQUIRE(life.Settled());

  REQUIRE(life.OnProcessLost(g1).action == LossAction::kRestart);
  REQUIRE(life.state() == ActorState::kRestarting);
  REQUIRE_FALSE(life.Settled());
  int g2 = life.BeginIncarnation();
  REQUIRE(g2 == g1 + 1);
  REQUIRE(life.OnCreated(g2));
  REQUIRE(life.OnProcessLost(g2).action == LossAction::kRestart);
  int g3 = life.BeginIncarnation();
  REQUIRE(life.OnCreated(g3));
  REQUIRE(life.restarts() == 2);

  REQUIRE(life.OnProcessLost(g3).action == LossAction::kAskCause);
  REQUIRE(life.dying());
  REQUIRE_FALSE(life.Settled());
  // A second report of the same loss changes nothing.
  REQUIRE(life.OnProcessLost(g3).action == LossAction::kIgnore);
  REQUIRE(life.MarkDead("killed by signal 9"));
  REQUIRE(life.IsDead());
  REQUIRE(life.death() == "killed by signal 9");
  REQUIRE_FALSE(life.MarkDead("again"));
  REQUIRE(life.death() == "killed by signal 9");
}

TEST_CASE("max_restarts=-1 restarts without limit; a kill still ends it", "[actors]") {
  // Invariant: with max_restarts -1 every loss is a restart (a new
  // generation), however many; a kill without restart is still final.
  ActorLifecycle life(/*max_restarts=*/-1);
  int g = life.BeginIncarnation();
  REQUIRE(life.OnCreated(g));
  for (int i = 1; i <= 100; ++i) {
    REQUIRE(life.OnProcessLost(g).action == LossAction::kRestart);
    g = life.BeginIncarnation();
    REQUIRE(life.OnCreated(g));
    REQUIRE(life.restarts() == i);
  }
  life.RequestKill(/*no_restart=*/true, "killed by lumen::ActorHandle::Kill()");
  REQUIRE(life.OnProcessLost(g).action == LossAction::kDead);
  REQUIRE(life.IsDead());
}

TEST_CASE("events of an older generation are stale", "[actors]") {
  // Invariant: a creation reply or a loss from a previous incarnation never
  // changes the state of the current one.
  ActorLifecycle life(/*max_restarts=*/1);
  int g1 = life.BeginIncarnation();
  REQUIRE(life.OnCreated(g1));
  REQUIRE(life.OnProcessLost(g1).action == LossAction::kRestart);
  int g2 = life.BeginIncarnation();
  REQUIRE_FALSE(life.OnCreated(g1));
  REQUIRE(life.state() == ActorState::kRestarting);
  REQUIRE(life.OnProcessLost(g1).action == LossAction::kIgnore);
  REQUIRE(life.restarts() == 1);
  REQUIRE(life.OnCreated(g2));
  REQUIRE(life.state() == ActorState::kAlive);
}

TEST_CASE("a kill without restart makes the next loss final", "[actors]") {
  // Invariant: after RequestKill(no_restart) the actor never restarts, whatever
  // its restart budget, and dies with the kill's reason.
  ActorLifecycle life(/*max_restarts=*/5);
  int g = life.BeginIncarnation();
  REQUIRE(life.OnCreated(g));
  life.RequestKill(/*no_restart=*/false, "restart it");
  REQUIRE_FALSE(life.kill_requested());
  REQUIRE(life.OnProcessLost(g).action == LossAction::kRestart);
  g = life.BeginIncarnation();
  REQUIRE(life.OnCreated(g));
  life.RequestKill(/*no_restart=*/true, "killed by lumen::ActorHandle::Kill()");
  LossDecision d = life.OnProcessLost(g);
  REQUIRE(d.action == LossAction::kDead);
  REQUIRE(d.reason == "killed by lumen::ActorHandle::Kill()");
  REQUIRE(life.IsDead());
  REQUIRE(life.restarts() == 1);
}

TEST_CASE("an actor that exits on purpose is not restarted", "[actors]") {
  // Invariant: ExitActor in the current generation turns its loss into death;
  // an exit flagged by an older generation does not.
  ActorLifecycle life(/*max_restarts=*/3);
  int g1 = life.BeginIncarnation();
  REQUIRE(life.OnCreated(g1));
  REQUIRE(life.OnProcessLost(g1).action == LossAction::kRestart);
  int g2 = life.BeginIncarnation();
  life.OnExiting(g1);  // stale
  REQUIRE(life.OnCreated(g2));
  life.OnExiting(g2);
  LossDecision d = life.OnProcessLost(g2);
  REQUIRE(d.action == LossAction::kDead);
  REQUIRE(d.reason == "the actor exited on purpose (lumen::ExitActor)");
  REQUIRE(std::string(ActorStateName(life.state())) == "DEAD");
}

TEST_CASE("an actor that cannot be placed dies while creating", "[actors]") {
  // Invariant: kCreating -> kDead is allowed (placement or factory failed), and
  // nothing revives a dead actor.
  ActorLifecycle life(/*max_restarts=*/1);
  int g = life.BeginIncarnation();
  REQUIRE(life.MarkDead("cannot place the actor"));
  REQUIRE_FALSE(life.OnCreated(g));
  REQUIRE(life.OnProcessLost(g).action == LossAction::kIgnore);
  REQUIRE(life.IsDead());
}

}  // namespace
}  // namespace lumen::actors
