#pragma once
// SHA-256 (FIPS 180-4). Cache hashes name directories that other processes trust by name, and the cubin
// checksum is what decides whether bytes on disk may be handed to the driver, so both use a
// cryptographic hash: accidental collisions are impossible in practice and a damaged file can never
// pass as a good one.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace moejit::detail {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::array<std::uint8_t, 32> digest();  // finishes; the object must not be updated afterwards
  std::string hex();                      // digest() as 64 lower-case hex digits

 private:
  void block(const std::uint8_t* p);
  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buf_{};
  std::size_t buf_len_ = 0;
  std::uint64_t total_ = 0;
};

std::string sha256_hex(const void* data, std::size_t size);
inline std::string sha256_hex(std::string_view s) { return sha256_hex(s.data(), s.size()); }

}  // namespace moejit::detail
