// SHA-256 and HMAC-SHA-256 against the FIPS 180-4 and RFC 4231 test vectors.
#include "core/base/hmac.h"

#include <gtest/gtest.h>

#include <string>

namespace ferry {
namespace {

std::string Hex(std::string_view text) {
  return DigestHex(Sha256({reinterpret_cast<const uint8_t*>(text.data()), text.size()}));
}

TEST(Sha256Test, MatchesFipsVectors) {
  EXPECT_EQ(Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the length needs a second padding block.
  EXPECT_EQ(Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(HmacSha256Test, MatchesRfc4231Vectors) {
  EXPECT_EQ(DigestHex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(DigestHex(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // A key longer than a block is hashed first.
  EXPECT_EQ(DigestHex(HmacSha256(std::string(131, '\xaa'),
                                 "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(HmacSha256Test, DigestEqualComparesEveryByte) {
  Digest a = HmacSha256("k", "m");
  Digest b = a;
  EXPECT_TRUE(DigestEqual(a, b));
  b[31] ^= 1;
  EXPECT_FALSE(DigestEqual(a, b));
}

TEST(RandomNonceTest, TwoNoncesDiffer) { EXPECT_NE(RandomNonce(), RandomNonce()); }

}  // namespace
}  // namespace ferry
