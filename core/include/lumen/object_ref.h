// lumen::ObjectRef<T>: a future for a value held by the cluster.
//
//   lumen::ObjectRef<int> ref = lumen::Task(Plus).Remote(1, 2);
//   std::shared_ptr<int> value = lumen::Get(ref);
//
// Copyable and cheap to copy; thread-safe. The object lives while any copy of
// its ObjectRef exists (here, in a pending task's arguments, or in another
// process that received it inside a value).
#pragma once

#include <memory>
#include <string>

#include "lumen/common/codec.h"
#include "lumen/internal/runtime.h"

namespace lumen {

template <class T>
class ObjectRef {
 public:
  using ValueType = T;

  ObjectRef() = default;
  explicit ObjectRef(std::shared_ptr<internal::RefHandle> handle) : handle_(std::move(handle)) {}

  bool IsNil() const { return handle_ == nullptr; }
  ObjectId ID() const { return handle_ ? handle_->id() : ObjectId(); }
  const std::string& OwnerAddress() const {
    static const std::string kEmpty;
    return handle_ ? handle_->owner_address() : kEmpty;
  }
  const std::shared_ptr<internal::RefHandle>& handle() const { return handle_; }

  friend bool operator==(const ObjectRef& a, const ObjectRef& b) { return a.ID() == b.ID(); }

 private:
  std::shared_ptr<internal::RefHandle> handle_;
};

template <class T>
struct IsObjectRef : std::false_type {};
template <class T>
struct IsObjectRef<ObjectRef<T>> : std::true_type {};

}  // namespace lumen

namespace lumen::codec {

// An ObjectRef inside a value travels as (object id, owner address); the
// receiving process registers it as a borrower.
template <class T>
struct Codec<ObjectRef<T>> {
  static void Encode(Writer& w, const ObjectRef<T>& ref) {
    // Pinned at its owner once per real encoding, not when only measured.
    if (ref.handle() != nullptr && !w.measuring()) ::lumen::internal::MarkRefEscaped(*ref.handle());
    Codec<std::string>::Encode(w, std::string(ref.ID().Binary()));
    Codec<std::string>::Encode(w, ref.OwnerAddress());
  }
  static void Decode(Reader& r, ObjectRef<T>& ref) {
    std::string id, owner;
    Codec<std::string>::Decode(r, id);
    Codec<std::string>::Decode(r, owner);
    if (!r.ok()) return;
    if (id.size() != ObjectId::kSize) {
      r.Fail("bad object id in ObjectRef");
      return;
    }
    ref = ObjectRef<T>(std::make_shared<::lumen::internal::RefHandle>(
        ObjectId::FromBinary(id), std::move(owner), /*decoded=*/true));
  }
};

}  // namespace lumen::codec
