// Content hashes (XXH3-128, hex) for cache keys: source text, options, arch
// and compiler versions go in, a 32-character hex digest comes out.
#pragma once
#include <string>
#include <string_view>

namespace ktune {

/// Incremental 128-bit content hash. Parts are length-prefixed, so
/// ("ab","c") and ("a","bc") hash differently.
class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  Hasher& add(std::string_view part);
  std::string hex() const;  ///< 32 lowercase hex digits

 private:
  void* state_;
};

/// One-shot hash of a single string.
std::string hash_hex(std::string_view text);

}  // namespace ktune
