/// @file
/// SHA-256 through OpenSSL's libcrypto (EVP; Debian libssl-dev): model pins and farm scene hashes.
#include "facetrace/core/sha256.h"

#include <openssl/evp.h>

namespace facetrace::core {

std::array<std::uint8_t, 32> sha256(std::span<const std::uint8_t> bytes) {
  std::array<std::uint8_t, 32> digest{};
  unsigned int n = 0;
  // EVP_Digest fails only when OpenSSL cannot allocate its context; the all-zero digest left then matches no pin
  // and no scene hash, so a failure refuses rather than accepts.
  if (EVP_Digest(bytes.data(), bytes.size(), digest.data(), &n, EVP_sha256(), nullptr) != 1 || n != digest.size())
    digest.fill(0);
  return digest;
}

std::string hex(std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (std::uint8_t b : bytes) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

std::string sha256_hex(std::span<const std::uint8_t> bytes) {
  const auto d = sha256(bytes);
  return hex(d);
}

}  // namespace facetrace::core
