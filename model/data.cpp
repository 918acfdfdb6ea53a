// Token streams (see data.hpp).
#include "model/data.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "base/error.hpp"
#include "base/files.hpp"

namespace ktune::model {

TokenStream TokenStream::synthetic(std::int64_t vocab, std::uint64_t seed, std::int64_t period) {
  KTUNE_REQUIRE(vocab > 0 && period > 1, "a synthetic stream needs vocab > 0 and period > 1");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(vocab - 1));
  TokenStream s;
  s.tokens_.resize(period);
  for (auto& t : s.tokens_) t = pick(rng);
  s.size_ = period;
  return s;
}

TokenStream TokenStream::from_file(const std::filesystem::path& path, std::int64_t vocab) {
  static_assert(std::endian::native == std::endian::little, "token files are little-endian uint16, read in place");
  TokenStream s;
  s.file_ = std::make_shared<const MappedFile>(path);
  const std::string_view bytes = s.file_->bytes();
  KTUNE_REQUIRE(bytes.size() % 2 == 0 && bytes.size() >= 4,
                fmt::format("{}: a token file holds raw uint16 values (at least two); got {} bytes", path.string(),
                            bytes.size()));
  s.size_ = static_cast<std::int64_t>(bytes.size() / 2);
  const std::uint16_t* tokens = s.file_tokens();
  for (std::int64_t i = 0; i < s.size(); ++i)
    KTUNE_REQUIRE(tokens[i] < vocab, fmt::format("{}: token {} at index {} is outside the vocabulary [0, {})",
                                                 path.string(), tokens[i], i, vocab));
  return s;
}

void TokenStream::sample(const RunShape& shape, std::mt19937_64& rng, std::vector<std::int32_t>& tokens,
                         std::vector<std::int32_t>& targets) const {
  tokens.resize(shape.tokens());
  targets.resize(shape.tokens());
  std::uniform_int_distribution<std::int64_t> start(0, size() - 1);
  for (std::int64_t b = 0; b < shape.batch; ++b)
    fill(start(rng), shape.context, tokens.data() + b * shape.context, targets.data() + b * shape.context);
}

void TokenStream::window(std::int64_t start, std::int64_t count, std::vector<std::int32_t>& tokens,
                         std::vector<std::int32_t>& targets) const {
  tokens.resize(static_cast<std::size_t>(count));
  targets.resize(static_cast<std::size_t>(count));
  fill(start, count, tokens.data(), targets.data());
}

void TokenStream::fill(std::int64_t start, std::int64_t count, std::int32_t* tokens, std::int32_t* targets) const {
  const std::int64_t n = size();
  for (std::int64_t t = 0; t < count; ++t) {
    tokens[t] = token((start + t) % n);
    targets[t] = token((start + t + 1) % n);
  }
}

TokenStream TokenStream::slice(std::int64_t begin, std::int64_t end) const {
  KTUNE_REQUIRE(begin >= 0 && begin + 2 <= end && end <= size_,
                fmt::format("tokens [{}, {}) of a stream of {}: a slice holds two or more of its tokens", begin, end,
                            size_));
  TokenStream s = *this;
  s.begin_ = begin_ + begin;
  s.size_ = end - begin;
  return s;
}

Split split_tokens(std::int64_t size, double fraction, std::int64_t context, const std::string& file) {
  const auto held_out = static_cast<std::int64_t>(std::llround(static_cast<double>(size) * fraction));
  const Split s{size - held_out, held_out};
  KTUNE_REQUIRE(std::min(s.train, s.held_out) >= context + 1,
                fmt::format("--val-split {} of {}'s {} tokens holds out {} and trains on {}: each part needs a "
                            "window of --ctx + 1 = {} tokens",
                            fraction, file, size, s.held_out, s.train, context + 1));
  return s;
}

}  // namespace ktune::model
