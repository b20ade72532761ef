// Actors: stateful remote objects.
//
//   class Counter {
//    public:
//     static Counter* Create(int start) { return new Counter(start); }
//     int Add(int x) { return n_ += x; }
//    private:
//     explicit Counter(int start) : n_(start) {}
//     int n_;
//   };
//   LUMEN_REMOTE(Counter::Create, &Counter::Add);
//
//   auto counter = lumen::Actor(Counter::Create).SetName("counter").Remote(10);
//   lumen::ObjectRef<int> r = counter.Task(&Counter::Add).Remote(5);  // returns at once
//   int fifteen = *lumen::Get(r);
//   auto same = lumen::GetActor<Counter>("counter");
//   counter.Kill();
//
// An actor is a worker process dedicated to one instance. Calls from one caller
// run in the order submitted. Handles are values: copy them, pass them to tasks
// and other actors; the actor lives while a handle exists somewhere (or until
// Kill), unless it is detached. Handles are thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "lumen/errors.h"
#include "lumen/internal/runtime.h"
#include "lumen/object_ref.h"
#include "lumen/scheduling.h"

namespace lumen {

enum class ActorLifetime { kNonDetached, kDetached };

template <class C>
class ActorHandle;

template <class C, class M>
class ActorTaskCaller {
 public:
  using Traits = internal::MethodTraits<M>;
  using Return = typename Traits::Return;

  ActorTaskCaller(std::shared_ptr<internal::RefHandle> actor, M method)
      : actor_(std::move(actor)), method_(internal::FunctionName(internal::PointerKey(method))) {
    static_assert(std::is_base_of_v<typename Traits::Class, C>,
                  "this method does not belong to the actor's class");
    if (method_.empty()) {
      throw Error("actor method is not registered; add it to LUMEN_REMOTE(...) as &Class::Method");
    }
  }

  // Submits the call and returns at once.
  template <class... A>
  ObjectRef<Return> Remote(A&&... args) {
    static_assert(sizeof...(A) == Traits::kArity, "wrong number of arguments for this method");
    return ObjectRef<Return>(internal::SubmitActorTask(
        actor_, method_,
        internal::EncodeArguments<typename Traits::Params>(std::forward<A>(args)...)));
  }

 private:
  std::shared_ptr<internal::RefHandle> actor_;
  std::string_view method_;  // the registry's name (FunctionName): lives as long as the process
};

template <class C>
class ActorHandle {
 public:
  ActorHandle() = default;
  explicit ActorHandle(std::shared_ptr<internal::RefHandle> ref) : ref_(std::move(ref)) {}

  template <class M>
  ActorTaskCaller<C, M> Task(M method) const {
    if (!ref_) throw Error("call on an empty ActorHandle");
    return ActorTaskCaller<C, M>(ref_, method);
  }

  // Ends the actor: pending and later calls fail with ActorDiedError. With
  // no_restart = false it is restarted if it has restarts left.
  void Kill(bool no_restart = true) const {
    if (ref_) internal::KillActor(*ref_, no_restart);
  }

  ObjectId ID() const { return ref_ ? ref_->id() : ObjectId(); }
  bool IsNil() const { return ref_ == nullptr; }
  const std::shared_ptr<internal::RefHandle>& handle() const { return ref_; }

 private:
  std::shared_ptr<internal::RefHandle> ref_;
};

// Options, then Remote(args...): lumen::Actor(Counter::Create).SetMaxRestarts(2).Remote(10).
template <class F>
class ActorCreator {
 public:
  using Traits = internal::FunctionTraits<F>;
  using Class = std::remove_pointer_t<typename Traits::Return>;
  static_assert(std::is_pointer_v<typename Traits::Return> && std::is_class_v<Class>,
                "an actor factory returns a pointer to a new instance (C*)");

  explicit ActorCreator(F f) : factory_(internal::FunctionName(internal::PointerKey(f))) {
    if (factory_.empty()) {
      throw Error("lumen::Actor: this factory is not registered; add it to LUMEN_REMOTE(...)");
    }
  }
  ActorCreator& SetName(std::string name) { options_.name = std::move(name); return *this; }
  // -1: restart without limit.
  ActorCreator& SetMaxRestarts(int n) { options_.max_restarts = n; return *this; }
  // Calls interrupted by the actor's death are resent to its next incarnation
  // up to n times each; -1: without limit.
  ActorCreator& SetMaxTaskRetries(int n) { options_.max_task_retries = n; return *this; }
  ActorCreator& SetMaxConcurrency(int n) { options_.max_concurrency = n < 1 ? 1 : n; return *this; }
  ActorCreator& SetLifetime(ActorLifetime lifetime) {
    options_.detached = lifetime == ActorLifetime::kDetached;
    return *this;
  }
  ActorCreator& SetResource(const std::string& name, double quantity) {
    options_.resources[name] = quantity;
    options_.placement[name] = quantity;
    return *this;
  }
  ActorCreator& SetResources(const std::map<std::string, double>& resources) {
    for (const auto& [k, v] : resources) SetResource(k, v);
    return *this;
  }
  ActorCreator& SetNumCpus(double n) { return SetResource("CPU", n); }
  ActorCreator& SetNumGpus(double n) { return SetResource("GPU", n); }
  ActorCreator& SetMemory(uint64_t bytes) { return SetResource("memory", static_cast<double>(bytes)); }
  ActorCreator& SetSchedulingStrategy(const SchedulingStrategy& strategy) {
    internal::ApplyStrategy(options_.scheduling, strategy);
    return *this;
  }
  // Runs within bundle `bundle_index` of `group` (-1: any of its bundles).
  ActorCreator& SetPlacementGroup(const PlacementGroup& group, int bundle_index = -1) {
    internal::ApplyPlacementGroup(options_.scheduling, group, bundle_index);
    return *this;
  }

  template <class... A>
  ActorHandle<Class> Remote(A&&... args) {
    static_assert(sizeof...(A) == Traits::kArity, "wrong number of arguments for this factory");
    auto encoded = internal::EncodeArguments<typename Traits::Params>(std::forward<A>(args)...);
    internal::ActorOptions options = options_;
    // As in Ray: one CPU to be placed, none held while it runs, unless asked.
    if (!options.placement.contains("CPU")) options.placement["CPU"] = 1;
    return ActorHandle<Class>(internal::CreateActor(factory_, std::move(encoded), options));
  }

 private:
  std::string factory_;
  internal::ActorOptions options_;
};

template <class F>
ActorCreator<F*> Actor(F* factory) {
  return ActorCreator<F*>(factory);
}

// The named actor's handle; throws lumen::Error if there is none.
template <class C>
ActorHandle<C> GetActor(const std::string& name) {
  return ActorHandle<C>(internal::GetNamedActor(name));
}

// Inside an actor method: the actor exits on purpose once this call returns (its
// pending calls fail with ActorDiedError; it is not restarted).
inline void ExitActor() { internal::ExitActorAfterCall(); }

}  // namespace lumen

namespace lumen::codec {

// A handle travels as its actor's id and owner; the receiver borrows it.
template <class C>
struct Codec<ActorHandle<C>> {
  static void Encode(Writer& w, const ActorHandle<C>& h) {
    Codec<ObjectRef<void>>::Encode(w, ObjectRef<void>(h.handle()));
  }
  static void Decode(Reader& r, ActorHandle<C>& h) {
    ObjectRef<void> ref;
    Codec<ObjectRef<void>>::Decode(r, ref);
    if (r.ok()) h = ActorHandle<C>(ref.handle());
  }
};

}  // namespace lumen::codec
