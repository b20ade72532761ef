// Lumen: remote tasks, futures and a shared-memory object store for C++20.
//
//   #include <lumen/lumen.h>
//
//   int Plus(int a, int b) { return a + b; }
//   LUMEN_REMOTE(Plus);
//
//   int main(int argc, char** argv) {
//     lumen::Init(argc, argv);             // first thing in main: workers re-run this binary
//     lumen::ObjectRef<int> sum = lumen::Task(Plus).Remote(1, 2);
//     int three = *lumen::Get(sum);
//     auto data = lumen::Put(std::vector<float>(1 << 20, 1.f));
//     lumen::Shutdown();
//   }
//
// Thread-safety: after Init, every function here may be called from any thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "lumen/common/buffer.h"
#include "lumen/cluster.h"
#include "lumen/common/codec.h"
#include "lumen/config.h"
#include "lumen/errors.h"
#include "lumen/internal/runtime.h"
#include "lumen/kv.h"
#include "lumen/object_ref.h"
#include "lumen/scheduling.h"

namespace lumen {

// Connects to Config::address / LUMEN_ADDRESS, or starts an embedded local
// cluster. In a worker process (this binary re-executed by a node daemon) it runs
// the worker loop and never returns. Throws lumen::Error if the cluster cannot be
// reached or started.
void Init(int argc, char** argv);
void Init(const Config& config);
void Init(const Config& config, int argc, char** argv);
// Disconnects; an embedded cluster is torn down (no processes, sockets or shared
// memory left). Idempotent.
void Shutdown();
bool IsInitialized();

namespace internal {

template <class F>
struct FunctionTraits;
template <class R, class... P>
struct FunctionTraits<R (*)(P...)> {
  using Return = R;
  using Params = std::tuple<std::decay_t<P>...>;
  static constexpr size_t kArity = sizeof...(P);
};
template <class R, class... P>
struct FunctionTraits<R(P...)> : FunctionTraits<R (*)(P...)> {};

template <class T>
T DecodeOrThrow(const ObjectBytes& object) {
  auto value = codec::DecodeValue<T>(object.bytes, object.keepalive);
  if (!value.ok()) {
    ThrowDecodeError(std::string(value.status().message()),
                     value.status().code() == absl::StatusCode::kFailedPrecondition);
  }
  return std::move(*value);
}

template <class F, size_t... I>
std::string InvokeWithArgs(F f, const std::vector<ObjectBytes>& args, std::index_sequence<I...>) {
  using Traits = FunctionTraits<F>;
  using Params = typename Traits::Params;
  if (args.size() != sizeof...(I)) {
    ThrowDecodeError("wrong number of arguments: got " + std::to_string(args.size()) +
                         ", the function takes " + std::to_string(sizeof...(I)),
                     false);
  }
  Params params{DecodeOrThrow<std::tuple_element_t<I, Params>>(args[I])...};
  if constexpr (std::is_void_v<typename Traits::Return>) {
    f(std::move(std::get<I>(params))...);
    return codec::EncodeValue<uint8_t>(0);
  } else {
    return codec::EncodeValue(f(std::move(std::get<I>(params))...));
  }
}

template <class M>
struct MethodTraits;
template <class R, class C, class... P>
struct MethodTraits<R (C::*)(P...)> {
  using Return = R;
  using Class = C;
  using Params = std::tuple<std::decay_t<P>...>;
  static constexpr size_t kArity = sizeof...(P);
};
template <class R, class C, class... P>
struct MethodTraits<R (C::*)(P...) const> : MethodTraits<R (C::*)(P...)> {};

template <class Params, size_t... I>
Params DecodeParams(const std::vector<ObjectBytes>& args, std::index_sequence<I...>) {
  if (args.size() != sizeof...(I)) {
    ThrowDecodeError("wrong number of arguments: got " + std::to_string(args.size()) +
                         ", the function takes " + std::to_string(sizeof...(I)),
                     false);
  }
  return Params{DecodeOrThrow<std::tuple_element_t<I, Params>>(args[I])...};
}

template <class R, class Call>
std::string EncodeResult(Call&& call) {
  if constexpr (std::is_void_v<R>) {
    call();
    return codec::EncodeValue<uint8_t>(0);
  } else {
    return codec::EncodeValue(call());
  }
}

// Registers a function (a task), a factory returning C* (an actor's
// constructor), or a member function pointer (an actor method).
template <class F>
bool RegisterRemote(const char* name, F f) {
  RemoteFunction entry;
  if constexpr (std::is_member_function_pointer_v<F>) {
    using Traits = MethodTraits<F>;
    using C = typename Traits::Class;
    entry.kind = RemoteFunction::Kind::kMethod;
    entry.call = [f](void* instance, const std::vector<ObjectBytes>& args) {
      auto params = DecodeParams<typename Traits::Params>(
          args, std::make_index_sequence<Traits::kArity>());
      return EncodeResult<typename Traits::Return>([&]() -> decltype(auto) {
        return std::apply(
            [&](auto&... p) -> decltype(auto) {
              return (static_cast<C*>(instance)->*f)(std::move(p)...);
            },
            params);
      });
    };
  } else {
    using Traits = FunctionTraits<F>;
    using R = typename Traits::Return;
    if constexpr (std::is_pointer_v<R> && std::is_class_v<std::remove_pointer_t<R>>) {
      using C = std::remove_pointer_t<R>;
      entry.kind = RemoteFunction::Kind::kActorFactory;
      entry.create = [f](const std::vector<ObjectBytes>& args) -> std::shared_ptr<void> {
        auto params = DecodeParams<typename Traits::Params>(
            args, std::make_index_sequence<Traits::kArity>());
        C* instance = std::apply([&](auto&... p) { return f(std::move(p)...); }, params);
        if (instance == nullptr) throw Error("the actor factory returned nullptr");
        return std::shared_ptr<void>(instance, [](void* p) { delete static_cast<C*>(p); });
      };
    } else {
      entry.kind = RemoteFunction::Kind::kFunction;
      entry.invoke = [f](const std::vector<ObjectBytes>& args) {
        return InvokeWithArgs(f, args, std::make_index_sequence<Traits::kArity>());
      };
    }
  }
  return RegisterFunction(name, PointerKey(f), std::move(entry));
}

// Types whose encoding is always small: no need to measure them first.
template <class V>
inline constexpr bool kAlwaysInline = std::is_arithmetic_v<V> || std::is_enum_v<V>;

// Encodes a value for the cluster: a small one into bytes that travel inline,
// a large one (over kInlineObjectLimit encoded) measured first and then written
// once, straight into the node's shared-memory store, so that it costs this
// process one copy (the store's) besides the value itself.
// `where`: the Put call site recorded for a stored value (empty: an argument).
template <class V>
TaskArgument EncodeForCluster(const V& value, const std::source_location& where = {}) {
  if constexpr (!kAlwaysInline<V>) {
    size_t size = codec::EncodedValueSize<V>(value);
    if (size > kInlineObjectLimit) {
      return TaskArgument{std::string(), PutWithWriter(
                                             size,
                                             [&](uint8_t* out) {
                                               absl::Status s =
                                                   codec::EncodeValueInto<V>(out, size, value);
                                               if (!s.ok()) throw Error(std::string(s.message()));
                                             },
                                             where)};
    }
    std::string bytes;
    bytes.reserve(size);
    codec::EncodeValueTo(&bytes, value);
    return TaskArgument{std::move(bytes), nullptr};
  } else {
    return TaskArgument{codec::EncodeValue<V>(value), nullptr};
  }
}

// Turns one Remote() argument into a TaskArgument for parameter type P.
template <class P, class A>
TaskArgument MakeArgument(A&& arg) {
  using Arg = std::decay_t<A>;
  if constexpr (IsObjectRef<Arg>::value) {
    static_assert(std::is_same_v<typename Arg::ValueType, P>,
                  "an ObjectRef<T> argument must have the parameter's type T");
    if (arg.IsNil()) throw Error("a nil ObjectRef was passed as a task argument");
    return TaskArgument{std::string(), arg.handle()};
  } else {
    static_assert(std::is_convertible_v<A, P>,
                  "argument is not convertible to the function's parameter type");
    if constexpr (std::is_same_v<Arg, P>) {
      return EncodeForCluster<P>(arg);  // no copy of the value first
    } else {
      return EncodeForCluster<P>(static_cast<P>(std::forward<A>(arg)));
    }
  }
}

// Encodes Remote()'s arguments for a callee whose parameters are `Params`
// (a std::tuple of decayed parameter types).
template <class Params, class... A>
std::vector<TaskArgument> EncodeArguments(A&&... args) {
  static_assert(sizeof...(A) == std::tuple_size_v<Params>, "wrong number of arguments");
  std::vector<TaskArgument> encoded;
  encoded.reserve(sizeof...(A));
  [&]<size_t... I>(std::index_sequence<I...>) {
    (encoded.push_back(MakeArgument<std::tuple_element_t<I, Params>>(std::forward<A>(args))), ...);
  }(std::make_index_sequence<sizeof...(A)>());
  return encoded;
}

template <class T>
std::vector<const RefHandle*> Handles(const std::vector<ObjectRef<T>>& refs) {
  std::vector<const RefHandle*> out;
  out.reserve(refs.size());
  for (const auto& r : refs) {
    if (r.IsNil()) throw Error("Get/Wait of a nil ObjectRef");
    out.push_back(r.handle().get());
  }
  return out;
}

}  // namespace internal

// A task to submit: lumen::Task(f).SetMaxRetries(1).Remote(args...).
template <class F>
class TaskCaller {
 public:
  using Traits = internal::FunctionTraits<F>;
  using Return = typename Traits::Return;

  explicit TaskCaller(F f) : function_(internal::FunctionName(internal::PointerKey(f))) {
    if (function_.empty()) {
      throw Error("lumen::Task: this function is not registered; add it to LUMEN_REMOTE(...)");
    }
  }
  // How many times the task runs again when its worker dies (default 3); -1:
  // without limit. A cancelled task is never retried.
  TaskCaller& SetMaxRetries(int n) { options_.max_retries = n; return *this; }
  // Also retry (within max_retries) when the task throws; by default an
  // exception is the task's result (Ray's retry_exceptions).
  TaskCaller& SetRetryExceptions(bool retry) { options_.retry_exceptions = retry; return *this; }
  // A name for the task in error messages (default: the function's name).
  TaskCaller& SetName(std::string name) { options_.name = std::move(name); return *this; }
  TaskCaller& SetResource(const std::string& name, double quantity) {
    options_.resources[name] = quantity;
    return *this;
  }
  TaskCaller& SetResources(const std::map<std::string, double>& resources) {
    for (const auto& [k, v] : resources) options_.resources[k] = v;
    return *this;
  }
  TaskCaller& SetNumCpus(double n) { return SetResource("CPU", n); }
  TaskCaller& SetNumGpus(double n) { return SetResource("GPU", n); }
  TaskCaller& SetMemory(uint64_t bytes) { return SetResource("memory", static_cast<double>(bytes)); }
  TaskCaller& SetSchedulingStrategy(const SchedulingStrategy& strategy) {
    internal::ApplyStrategy(options_.scheduling, strategy);
    return *this;
  }
  // Runs within bundle `bundle_index` of `group` (-1: any of its bundles).
  TaskCaller& SetPlacementGroup(const PlacementGroup& group, int bundle_index = -1) {
    internal::ApplyPlacementGroup(options_.scheduling, group, bundle_index);
    return *this;
  }

  template <class... A>
  ObjectRef<Return> Remote(A&&... args) {
    static_assert(sizeof...(A) == Traits::kArity, "wrong number of arguments for this function");
    return ObjectRef<Return>(internal::SubmitTask(
        function_,
        internal::EncodeArguments<typename Traits::Params>(std::forward<A>(args)...),
        options_));
  }

 private:
  std::string_view function_;  // the registry's name (FunctionName): lives as long as the process
  internal::TaskOptions options_;
};

template <class F>
TaskCaller<F*> Task(F* f) {
  return TaskCaller<F*>(f);
}

// Stores `value` in the cluster; small values stay in this process, large ones
// go to the node's shared-memory store. Throws ObjectStoreFullError. `where`
// (leave it defaulted) is the call site `lumen memory` shows for the object.
template <class T>
ObjectRef<std::decay_t<T>> Put(const T& value,
                               std::source_location where = std::source_location::current()) {
  using V = std::decay_t<T>;
  // Large values are written straight into shared memory: one copy.
  internal::TaskArgument encoded = internal::EncodeForCluster<V>(value, where);
  if (encoded.ref) return ObjectRef<V>(std::move(encoded.ref));
  return ObjectRef<V>(internal::PutEncoded(std::move(encoded.value), where));
}

template <class T>
std::shared_ptr<T> Get(const ObjectRef<T>& ref,
                       std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
  auto objects = internal::GetObjects(internal::Handles(std::vector<ObjectRef<T>>{ref}), timeout);
  if constexpr (std::is_void_v<T>) {
    return nullptr;
  } else {
    return std::make_shared<T>(internal::DecodeOrThrow<T>(objects[0]));
  }
}

template <class T>
std::vector<std::shared_ptr<T>> Get(const std::vector<ObjectRef<T>>& refs,
                                    std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
  auto objects = internal::GetObjects(internal::Handles(refs), timeout);
  std::vector<std::shared_ptr<T>> out;
  out.reserve(objects.size());
  for (const auto& object : objects) {
    out.push_back(std::make_shared<T>(internal::DecodeOrThrow<T>(object)));
  }
  return out;
}

// A zero-copy, read-only view of an array held by the object store: the span
// points into shared memory and stays valid while this view (or a copy) lives.
template <class T>
class ArrayView {
 public:
  ArrayView(std::span<const T> span, std::shared_ptr<const void> keepalive)
      : span_(span), keepalive_(std::move(keepalive)) {}
  std::span<const T> span() const { return span_; }
  const T* data() const { return span_.data(); }
  size_t size() const { return span_.size(); }
  const T& operator[](size_t i) const { return span_[i]; }
  auto begin() const { return span_.begin(); }
  auto end() const { return span_.end(); }

 private:
  std::span<const T> span_;
  std::shared_ptr<const void> keepalive_;
};

// Reads a std::vector<T> object without copying it (T arithmetic).
template <class T>
ArrayView<T> GetArray(const ObjectRef<std::vector<T>>& ref,
                      std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
  static_assert(codec::kIsZeroCopyArray<std::vector<T>>, "GetArray needs an arithmetic T");
  auto objects =
      internal::GetObjects(internal::Handles(std::vector<ObjectRef<std::vector<T>>>{ref}), timeout);
  auto span = codec::DecodeArrayView<T>(objects[0].bytes);
  if (!span.ok()) {
    internal::ThrowDecodeError(std::string(span.status().message()),
                               span.status().code() == absl::StatusCode::kFailedPrecondition);
  }
  return ArrayView<T>(*span, std::move(objects[0].keepalive));
}

// Cancels the task that produces `ref` (Ray's ray.cancel). `Get(ref)` then
// throws TaskCancelledError at once, and the task is never retried:
//  - waiting for its arguments or for a worker: removed, it never runs;
//  - sent to a worker: marked cancelled; with `force` the worker is killed
//    (other tasks queued on that worker run elsewhere, without using their
//    retry budget); without it the task runs to its end and its result is
//    dropped (C++ cannot interrupt a running function).
// No effect on a finished task, a Put object or an actor call. Only the
// process that submitted the task may cancel it (others: lumen::Error). Tasks
// the cancelled task submitted are not cancelled (no recursive=true).
template <class T>
void Cancel(const ObjectRef<T>& ref, bool force = false) {
  if (ref.handle() == nullptr) throw Error("lumen::Cancel: a nil ObjectRef");
  internal::CancelTask(*ref.handle(), force);
}

template <class T>
struct WaitResult {
  std::vector<ObjectRef<T>> ready;
  std::vector<ObjectRef<T>> unready;
};

namespace internal {

template <class T>
void CheckNumReturns(const std::vector<ObjectRef<T>>& refs, size_t num_returns) {
  if (num_returns > refs.size()) {
    throw Error("lumen::Wait: num_returns (" + std::to_string(num_returns) +
                ") is larger than the number of refs (" + std::to_string(refs.size()) + ")");
  }
}

// WaitObjects over `refs` (throws for a nil ref). The handle list reuses a
// per-thread buffer: a Wait(refs, 1) loop over N refs called Handles' fresh
// allocation of 8N bytes on every call (with malloc's consolidation of large
// chunks ~10 % of that loop's CPU, stop 31). Taken out of the buffer for the
// call, so a nested Wait on this thread would allocate its own; a buffer over
// 64 Ki handles is not kept.
template <class T>
std::vector<bool> WaitRefs(const std::vector<ObjectRef<T>>& refs, size_t num_returns,
                           std::optional<std::chrono::milliseconds> timeout) {
  thread_local std::vector<const RefHandle*> buffer;
  std::vector<const RefHandle*> handles = std::move(buffer);
  handles.resize(refs.size());  // zeroes only beyond its last size
  for (size_t i = 0; i < refs.size(); ++i) {
    const RefHandle* h = refs[i].handle().get();
    if (h == nullptr) throw Error("Get/Wait of a nil ObjectRef");
    handles[i] = h;
  }
  std::vector<bool> ready = WaitObjects(handles, num_returns, timeout);
  if (handles.capacity() <= (size_t{1} << 16)) buffer = std::move(handles);
  return ready;
}

// Splits `refs` into a WaitResult as Ray's `ray.wait` does: the first
// `num_returns` refs (in input order) that `ready` marks go to `ready`, every
// other ref (unready, or ready beyond the first `num_returns`) to `unready`,
// both in input order. Each ref is copied (an lvalue `refs`) or moved (an
// rvalue: no reference-count change).
template <class T, class Refs>
WaitResult<T> SplitByReady(Refs&& refs, const std::vector<bool>& ready, size_t num_returns) {
  constexpr bool kMove = std::is_rvalue_reference_v<Refs&&>;
  const size_t n_ready =
      std::min(num_returns, static_cast<size_t>(std::count(ready.begin(), ready.end(), true)));
  WaitResult<T> result;
  result.ready.reserve(n_ready);
  result.unready.reserve(refs.size() - n_ready);
  for (size_t i = 0; i < refs.size(); ++i) {
    auto& to = ready[i] && result.ready.size() < n_ready ? result.ready : result.unready;
    if constexpr (kMove) {
      to.push_back(std::move(refs[i]));
    } else {
      to.push_back(refs[i]);
    }
  }
  return result;
}

// The same for an rvalue `refs` without new vectors: the ready refs taken
// (the first `num_returns` that `ready` marks) move into `ready`, the others
// close up in place (input order kept) and the vector itself becomes
// `unready`. A Wait(std::move(refs), 1) loop over a list that completes in
// order moves each remaining ref one slot per call, nothing else.
template <class T>
WaitResult<T> SplitByReadyInPlace(std::vector<ObjectRef<T>>& refs, const std::vector<bool>& ready,
                                  size_t num_returns) {
  const size_t n = refs.size();
  size_t i = 0;
  while (i < n && !ready[i]) ++i;  // the first ready ref: nothing before it moves
  WaitResult<T> result;
  if (i < n && num_returns > 0) {
    result.ready.reserve(std::min(num_returns, n - i));  // may throw: before any move
    // Every slot in [out, i) has been emptied (taken or moved on): a ref moves
    // down by construction over the empty slot, which an assignment or a swap
    // would read first, chaining each step to the last through memory. The
    // shift of what is left is most of a Wait(std::move(refs), 1) loop's work.
    auto move_down = [&refs](size_t to, size_t from) {
      std::destroy_at(&refs[to]);  // empty: nothing to release
      std::construct_at(&refs[to], std::move(refs[from]));
    };
    size_t out = i;
    for (; i < n && result.ready.size() < num_returns; ++i) {
      if (ready[i]) {
        result.ready.push_back(std::move(refs[i]));
      } else {
        move_down(out++, i);
      }
    }
    for (; i < n; ++i) move_down(out++, i);  // enough taken: the rest closes up
    refs.resize(out);  // the emptied tail
  }
  result.unready = std::move(refs);
  return result;
}

}  // namespace internal

// Waits until `num_returns` of `refs` are ready or `timeout` passes; returns
// in `ready` the first `num_returns` refs (in input order) that are ready by
// then, fewer only on a timeout, and every other ref in `unready` (including
// ready ones beyond the first `num_returns`), both in input order, as Ray's
// `ray.wait`. A failed object counts as ready (Get then throws its error). A
// ref listed twice counts, and is reported, once per occurrence.
template <class T>
WaitResult<T> Wait(const std::vector<ObjectRef<T>>& refs, size_t num_returns,
                   std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
  internal::CheckNumReturns(refs, num_returns);
  auto ready = internal::WaitRefs(refs, num_returns, timeout);
  return internal::SplitByReady<T>(refs, ready, num_returns);
}

// The same, moving the refs into the result instead of copying them (no
// reference counting per ref): for a loop that waits on what is left,
//   while (!refs.empty()) {
//     auto [ready, unready] = lumen::Wait(std::move(refs), 1);
//     refs = std::move(unready);
//   }
// `refs` is left empty, unless the call throws (then it is unchanged).
template <class T>
WaitResult<T> Wait(std::vector<ObjectRef<T>>&& refs, size_t num_returns,
                   std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
  internal::CheckNumReturns(refs, num_returns);
  auto ready = internal::WaitRefs(refs, num_returns, timeout);
  WaitResult<T> result = internal::SplitByReadyInPlace<T>(refs, ready, num_returns);
  refs.clear();
  return result;
}

}  // namespace lumen

#include "lumen/actor.h"  // after the task templates it builds on

// LUMEN_REMOTE(f1, f2, ...): registers functions, actor factories (returning C*)
// and actor methods (&C::Method) by name, so that every process of this binary
// can run them.
#define LUMEN_INTERNAL_CAT_(a, b) a##b
#define LUMEN_INTERNAL_CAT(a, b) LUMEN_INTERNAL_CAT_(a, b)
#define LUMEN_INTERNAL_REGISTER_ONE(f)                                               \
  [[maybe_unused]] static const bool LUMEN_INTERNAL_CAT(lumen_remote_registered_, \
                                                        __COUNTER__) =            \
      ::lumen::internal::RegisterRemote(#f, f);
#define LUMEN_INTERNAL_EXPAND(x) x
#define LUMEN_INTERNAL_FE_1(m, x) m(x)
#define LUMEN_INTERNAL_FE_2(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_1(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_3(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_2(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_4(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_3(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_5(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_4(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_6(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_5(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_7(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_6(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_8(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_7(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_9(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_8(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_10(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_9(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_11(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_10(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_12(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_11(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_13(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_12(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_14(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_13(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_15(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_14(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_16(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_15(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_17(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_16(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_18(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_17(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_19(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_18(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_20(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_19(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_21(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_20(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_22(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_21(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_23(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_22(m, __VA_ARGS__))
#define LUMEN_INTERNAL_FE_24(m, x, ...) m(x) LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_FE_23(m, __VA_ARGS__))
#define LUMEN_INTERNAL_GET_FE(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, \
                              _16, _17, _18, _19, _20, _21, _22, _23, _24, NAME, ...)        \
  NAME
#define LUMEN_REMOTE(...)                                                                      \
  LUMEN_INTERNAL_EXPAND(LUMEN_INTERNAL_GET_FE(                                                 \
      __VA_ARGS__, LUMEN_INTERNAL_FE_24, LUMEN_INTERNAL_FE_23, LUMEN_INTERNAL_FE_22,           \
      LUMEN_INTERNAL_FE_21, LUMEN_INTERNAL_FE_20, LUMEN_INTERNAL_FE_19, LUMEN_INTERNAL_FE_18,  \
      LUMEN_INTERNAL_FE_17, LUMEN_INTERNAL_FE_16, LUMEN_INTERNAL_FE_15, LUMEN_INTERNAL_FE_14,  \
      LUMEN_INTERNAL_FE_13, LUMEN_INTERNAL_FE_12, LUMEN_INTERNAL_FE_11, LUMEN_INTERNAL_FE_10,  \
      LUMEN_INTERNAL_FE_9, LUMEN_INTERNAL_FE_8, LUMEN_INTERNAL_FE_7, LUMEN_INTERNAL_FE_6,      \
      LUMEN_INTERNAL_FE_5, LUMEN_INTERNAL_FE_4, LUMEN_INTERNAL_FE_3, LUMEN_INTERNAL_FE_2,      \
      LUMEN_INTERNAL_FE_1)(LUMEN_INTERNAL_REGISTER_ONE, __VA_ARGS__))
