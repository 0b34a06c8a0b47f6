// Replay attacks on ferry's handshakes (core/runtime/handshake.h), as a sniffer on the network
// would mount them: record one real handshake through a loopback relay, then replay its client
// half to a real listener, or its server half to a real client from a fake listener.
//
// Threading: each object runs one connection on its own thread and joins it when asked for the
// result (or on destruction). Every socket operation has a 5 s deadline.
#pragma once

#include <cstddef>
#include <thread>

#include "core/base/status.h"
#include "core/runtime/store.h"

namespace ferry::testing {

// One handshake as it crossed the wire: the listener's challenge (magic + nonce), the client's
// hello and the listener's reply.
struct RecordedHandshake {
  Bytes challenge;
  Bytes hello;
  Bytes reply;
};

// Listens on 127.0.0.1; relays the first connection to 127.0.0.1:`target_port` and records its
// handshake (a hello of `hello_bytes`, a reply of `reply_bytes`); then closes both sides.
class HandshakeRecorder {
 public:
  HandshakeRecorder(int target_port, size_t hello_bytes, size_t reply_bytes);
  ~HandshakeRecorder();
  int port() const { return port_; }
  // Waits for the relayed handshake; fails when it did not complete.
  Result<RecordedHandshake> Wait();

 private:
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread relay_;
  Status status_;
  RecordedHandshake recorded_;
};

// Connects to a real listener at 127.0.0.1:`port`, reads its fresh challenge and sends
// `recorded.hello`. Returns whether the listener answered it (accepted the replay).
bool ReplayHelloTo(int port, const RecordedHandshake& recorded);

// A fake listener on 127.0.0.1 that plays the recorded listener to the first client: sends
// `recorded.challenge`, reads a hello of `recorded.hello.size()` bytes, answers `recorded.reply`.
class ReplayingListener {
 public:
  explicit ReplayingListener(RecordedHandshake recorded);
  ~ReplayingListener();
  int port() const { return port_; }

 private:
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread serve_;
};

}  // namespace ferry::testing
