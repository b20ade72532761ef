// Coalescing the writes of one event-loop turn (issue 13: one write syscall
// for the frames a turn sends to a connection, not one per frame).
//
//   {
//     lumen::WriteBatch batch;          // io thread, e.g. around a read's frames
//     conn->Send(a); conn->Send(b);     // queued, not written yet
//   }                                   // the outermost batch ends: one write
//
// While a WriteBatch is alive on a thread, Connection::Send and SendFramed on
// that thread queue their frames and register the connection; when the
// outermost WriteBatch on the thread ends, every registered connection starts
// one write of all it has queued. Connection opens one around the frames of
// each read, and lumen::Post around every posted handler, so a handler never
// needs to open one itself. Without a batch, Send writes at once, as before.
//
// Thread-compatible: the state is per thread (a batch only sees the
// connections of the thread that opened it, which is their io thread).
#pragma once

#include <memory>

namespace lumen {

class Connection;

class WriteBatch {
 public:
  WriteBatch();
  ~WriteBatch();
  WriteBatch(const WriteBatch&) = delete;
  WriteBatch& operator=(const WriteBatch&) = delete;

  // A WriteBatch is alive on the calling thread.
  static bool Active();
  // Flushes `conn` when the outermost batch of this thread ends (only while
  // Active(); the connection keeps itself registered once per batch).
  static void FlushAtEnd(std::shared_ptr<Connection> conn);
};

}  // namespace lumen
