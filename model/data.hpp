// Token streams for training and evaluation: a learnable synthetic stream
// (one random sequence repeated), or a file of uint16 tokens (the CS336
// memmap format: raw little-endian uint16, no header).
#pragma once
#include <cstdint>
#include <filesystem>
#include <random>
#include <vector>

#include "model/config.hpp"

namespace ktune::model {

class TokenStream {
 public:
  /// One random sequence of `period` tokens in [0, vocab), repeated forever:
  /// once seen, every next token is predictable from the context.
  static TokenStream synthetic(std::int64_t vocab, std::uint64_t seed, std::int64_t period = 64);
  /// Raw uint16 tokens; throws kIo when unreadable, kInvalidInput when it
  /// holds fewer than two tokens or a token outside [0, vocab).
  static TokenStream from_file(const std::filesystem::path& path, std::int64_t vocab);

  /// A batch of `shape.batch` windows at random offsets: tokens and the
  /// next-token targets, (batch, context) each. The stream repeats when a
  /// window runs past its end.
  void sample(const RunShape& shape, std::mt19937_64& rng, std::vector<std::int32_t>& tokens,
              std::vector<std::int32_t>& targets) const;

  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }

 private:
  std::vector<std::int32_t> tokens_;
};

}  // namespace ktune::model
