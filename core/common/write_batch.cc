#include "lumen/common/write_batch.h"

#include <vector>

#include "lumen/common/connection.h"

namespace lumen {
namespace {

// The batches open on this thread, and the connections to flush when the
// outermost ends.
thread_local int depth = 0;
thread_local std::vector<std::shared_ptr<Connection>> to_flush;

}  // namespace

WriteBatch::WriteBatch() { ++depth; }

WriteBatch::~WriteBatch() {
  if (--depth > 0 || to_flush.empty()) return;
  // A flush may Send (and so register) again, e.g. from a close handler:
  // flush until nothing is left, outside any batch.
  std::vector<std::shared_ptr<Connection>> conns;
  while (!to_flush.empty()) {
    conns.clear();
    conns.swap(to_flush);
    for (auto& conn : conns) conn->FlushDeferred();
  }
}

bool WriteBatch::Active() { return depth > 0; }

void WriteBatch::FlushAtEnd(std::shared_ptr<Connection> conn) {
  to_flush.push_back(std::move(conn));
}

}  // namespace lumen
