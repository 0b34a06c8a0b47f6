// The Transport base class's optional methods: a transport that implements only the two-sided
// path gets kUnimplemented from RemoteKey, PostPut, PostRecvNotify and Cancel, naming itself.
#include "core/runtime/transport.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

// Implements exactly the required methods, none of the optional ones.
class TwoSidedOnly final : public Transport {
 public:
  std::string_view name() const override { return "two-sided-only"; }
  TransportCapabilities capabilities() const override { return TransportCapabilities{}; }
  Result<Bytes> LocalEndpointInfo() override { return Bytes{}; }
  Status Connect(int, std::span<const uint8_t>, Deadline) override { return Status::Ok(); }
  Result<MemoryHandle> RegisterMemory(const MemoryDesc&) override { return MemoryHandle{1}; }
  Status DeregisterMemory(MemoryHandle) override { return Status::Ok(); }
  Result<RequestId> PostSend(int, uint64_t, const LocalBuffer&) override { return RequestId{1}; }
  Result<RequestId> PostRecv(int, uint64_t, const LocalBuffer&) override { return RequestId{2}; }
  Result<int> Poll(std::span<Completion>, Deadline) override { return 0; }
  void Abort(const Status&) override {}
};

TEST(TransportTest, DefaultCapabilitiesOfferNeitherOneSidedNorCancel) {
  TransportCapabilities caps;
  EXPECT_TRUE(caps.two_sided);
  EXPECT_FALSE(caps.one_sided);
  EXPECT_FALSE(caps.cancel);
}

TEST(TransportTest, OptionalMethodsDefaultToUnimplemented) {
  TwoSidedOnly transport;
  const LocalBuffer buffer{MemoryHandle{1}, 0, 8};
  const Status key = transport.RemoteKey(MemoryHandle{1}).status();
  const Status put = transport.PostPut(0, 1, buffer, RemoteBuffer{}).status();
  const Status notify = transport.PostRecvNotify(0, 1).status();
  const Status cancel = transport.Cancel(1);
  for (const Status* status : {&key, &put, &notify, &cancel}) {
    EXPECT_EQ(status->code(), StatusCode::kUnimplemented) << status->ToString();
    EXPECT_NE(status->message().find("two-sided-only"), std::string::npos) << status->ToString();
  }
}

}  // namespace
}  // namespace ferry
