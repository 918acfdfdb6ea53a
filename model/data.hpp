// Token streams for training and evaluation: a learnable synthetic stream
// (one random sequence repeated), or a token file: the CS336 memmap format
// (raw little-endian uint16, no header, as arr.tofile writes), or a NumPy
// .npy file of a 1-D integer array (as np.save writes): uint16, or uint32
// for a vocabulary past 65536 ids, uint8 for bytes, int32, int64, uint64.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/files.hpp"
#include "model/config.hpp"

namespace ktune::model {

class TokenStream {
 public:
  /// One random sequence of `period` tokens in [0, vocab), repeated forever:
  /// once seen, every next token is predictable from the context.
  static constexpr std::int64_t kSyntheticPeriod = 64;
  static TokenStream synthetic(std::int64_t vocab, std::uint64_t seed, std::int64_t period = kSyntheticPeriod);
  /// Raw uint16 tokens, or a .npy array of integers (told by its magic, not
  /// its name; of the dtypes above), read where they lie (the file is
  /// mapped, not loaded: as CS336's np.memmap or np.load(mmap_mode='r'), a
  /// corpus larger than memory trains); throws kIo when unreadable,
  /// kInvalidInput when it holds fewer than two tokens or a token outside
  /// [0, vocab) (every token is checked here), or for a .npy array that is
  /// not a 1-D one of those dtypes in C order.
  static TokenStream from_file(const std::filesystem::path& path, std::int64_t vocab);

  /// A batch of `shape.batch` windows at random offsets: tokens and the
  /// next-token targets, (batch, context) each. A window and its next token
  /// lie within the stream (throws kInvalidInput when it holds no window of
  /// shape.context + 1 tokens), except in the synthetic stream, which
  /// repeats with no seam and whose windows start anywhere.
  void sample(const RunShape& shape, std::mt19937_64& rng, std::vector<std::int32_t>& tokens,
              std::vector<std::int32_t>& targets) const;

  /// The `count` tokens from `start` and their next tokens (wrapping past the end, as sample's windows).
  void window(std::int64_t start, std::int64_t count, std::vector<std::int32_t>& tokens,
              std::vector<std::int32_t>& targets) const;

  /// Tokens [begin, end) as a stream of their own (a file's share its
  /// mapping): a split of a corpus. Throws kInvalidInput unless
  /// 0 <= begin and begin + 2 <= end <= size().
  TokenStream slice(std::int64_t begin, std::int64_t end) const;

  std::int64_t size() const { return size_; }
  /// A content hash of the stream's token ids (hex), not of their storage:
  /// the same ids in a raw uint16 file and a .npy of any integer dtype hash
  /// alike. A resumed run checks it is drawing from what the checkpoint's
  /// run drew from.
  std::string fingerprint() const;
  /// The hash of the bytes that store the tokens (hex), which checkpoints
  /// wrote before fingerprint() was of ids: the same ids at another width
  /// hash otherwise.
  std::string bytes_fingerprint() const;

 private:
  // The at-th token of the file (from its first byte, in tokens of width_ bytes).
  std::int32_t file_token(std::int64_t at) const;
  std::int32_t token(std::int64_t i) const { return file_ ? file_token(begin_ + i) : tokens_[begin_ + i]; }
  // Tokens start, start + 1, ... (count of them, wrapping) and their next ones.
  void fill(std::int64_t start, std::int64_t count, std::int32_t* tokens, std::int32_t* targets) const;

  bool periodic_ = false;                   // the whole synthetic stream: it wraps with no seam
  std::vector<std::int32_t> tokens_;        // the synthetic stream's
  std::shared_ptr<const MappedFile> file_;  // a token file's, mapped
  std::int64_t begin_ = 0, size_ = 0;       // the stream's tokens, from the sequence's or the file's begin_-th
  int width_ = 2;                           // a token file's bytes per token: raw files and '<u2' 2
  bool signed_ = false;                     // and whether they are signed integers
};

/// The split `--val-split` makes of a corpus of `size` tokens: the last
/// round(size x fraction) held out for validation, the rest for training.
/// Throws kInvalidInput, naming `file`, when either part is shorter than
/// one window of `context` tokens and its next-token targets.
struct Split {
  std::int64_t train = 0, held_out = 0;  ///< tokens of each part
};
Split split_tokens(std::int64_t size, double fraction, std::int64_t context, const std::string& file);

}  // namespace ktune::model
