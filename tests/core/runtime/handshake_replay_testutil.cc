// Replay attacks on ferry's handshakes: the recording relay and the replaying listener.
#include "tests/core/runtime/handshake_replay_testutil.h"

#include <sys/socket.h>
#include <unistd.h>

#include <utility>

#include "core/runtime/socket_util.h"

namespace ferry::testing {
namespace {

constexpr size_t kChallengeBytes = 4 + 16;

Deadline FiveSeconds() { return Deadline::AfterSeconds(5); }

// Reads `bytes` from `from`, appends them to `record` and writes them to `to`.
Status Relay(int from, int to, size_t bytes, Bytes& record) {
  record.resize(bytes);
  FERRY_RETURN_IF_ERROR(ReadAll(from, record.data(), static_cast<int64_t>(bytes), FiveSeconds()));
  return WriteAll(to, record.data(), static_cast<int64_t>(bytes), FiveSeconds());
}

}  // namespace

HandshakeRecorder::HandshakeRecorder(int target_port, size_t hello_bytes, size_t reply_bytes) {
  auto listener = ListenTcp("127.0.0.1", 0);
  if (!listener.ok()) {
    status_ = listener.status();
    return;
  }
  listen_fd_ = listener->fd;
  port_ = listener->port;
  relay_ = std::thread([this, target_port, hello_bytes, reply_bytes] {
    auto client = AcceptTcp(listen_fd_, FiveSeconds());
    auto server = ConnectTcp("127.0.0.1", target_port, FiveSeconds());
    if (!client.ok() || *client < 0 || !server.ok()) {
      status_ = Unavailable("the relay could not connect both sides");
    } else {
      status_ = Relay(*server, *client, kChallengeBytes, recorded_.challenge);
      if (status_.ok()) status_ = Relay(*client, *server, hello_bytes, recorded_.hello);
      if (status_.ok()) status_ = Relay(*server, *client, reply_bytes, recorded_.reply);
    }
    if (client.ok() && *client >= 0) ::close(*client);
    if (server.ok()) ::close(*server);
  });
}

HandshakeRecorder::~HandshakeRecorder() {
  if (relay_.joinable()) relay_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

Result<RecordedHandshake> HandshakeRecorder::Wait() {
  if (relay_.joinable()) relay_.join();
  if (!status_.ok()) return status_;
  return recorded_;
}

bool ReplayHelloTo(int port, const RecordedHandshake& recorded) {
  auto fd = ConnectTcp("127.0.0.1", port, FiveSeconds());
  if (!fd.ok()) return false;
  Bytes challenge(kChallengeBytes);
  Bytes reply(1);
  const bool answered =
      ReadAll(*fd, challenge.data(), static_cast<int64_t>(challenge.size()), FiveSeconds()).ok() &&
      WriteAll(*fd, recorded.hello.data(), static_cast<int64_t>(recorded.hello.size()), FiveSeconds()).ok() &&
      ReadAll(*fd, reply.data(), 1, FiveSeconds()).ok();
  ::close(*fd);
  return answered;
}

ReplayingListener::ReplayingListener(RecordedHandshake recorded) {
  auto listener = ListenTcp("127.0.0.1", 0);
  if (!listener.ok()) return;
  listen_fd_ = listener->fd;
  port_ = listener->port;
  serve_ = std::thread([this, recorded = std::move(recorded)] {
    auto fd = AcceptTcp(listen_fd_, FiveSeconds());
    if (!fd.ok() || *fd < 0) return;
    Bytes hello(recorded.hello.size());
    if (WriteAll(*fd, recorded.challenge.data(), static_cast<int64_t>(recorded.challenge.size()), FiveSeconds()).ok() &&
        ReadAll(*fd, hello.data(), static_cast<int64_t>(hello.size()), FiveSeconds()).ok()) {
      (void)WriteAll(*fd, recorded.reply.data(), static_cast<int64_t>(recorded.reply.size()), FiveSeconds());
    }
    // Leaves the connection open until the client is done judging the reply.
    uint8_t sink = 0;
    (void)ReadAll(*fd, &sink, 1, FiveSeconds());
    ::close(*fd);
  });
}

ReplayingListener::~ReplayingListener() {
  if (serve_.joinable()) serve_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

}  // namespace ferry::testing
