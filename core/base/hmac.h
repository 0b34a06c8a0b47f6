// SHA-256 and HMAC-SHA-256 (FIPS 180-4, RFC 2104), self-contained, for authenticating connections
// between ranks with a shared secret (the job token or a key derived from it). Not a general
// crypto library: no streaming API, inputs are whole byte strings. Pure functions; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace ferry {

using Digest = std::array<uint8_t, 32>;

Digest Sha256(std::span<const uint8_t> data);
Digest HmacSha256(std::string_view key, std::span<const uint8_t> message);
Digest HmacSha256(std::string_view key, std::string_view message);

// Constant-time comparison of two digests (no early exit, so timing reveals nothing).
bool DigestEqual(const Digest& a, const Digest& b);

// Lower-case hex of a digest (64 characters).
std::string DigestHex(const Digest& digest);

// 16 random bytes from the kernel (getrandom); a challenge or nonce.
std::array<uint8_t, 16> RandomNonce();

}  // namespace ferry
