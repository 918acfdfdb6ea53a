// Token streams (see data.hpp).
#include "model/data.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>
#include <regex>
#include <string_view>
#include <type_traits>
#include <cmath>

#include "base/error.hpp"
#include "base/files.hpp"
#include "base/hash.hpp"

namespace ktune::model {

TokenStream TokenStream::synthetic(std::int64_t vocab, std::uint64_t seed, std::int64_t period) {
  KTUNE_REQUIRE(vocab > 0 && period > 1, "a synthetic stream needs vocab > 0 and period > 1");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(vocab - 1));
  TokenStream s;
  s.tokens_.resize(period);
  for (auto& t : s.tokens_) t = pick(rng);
  s.size_ = period;
  s.periodic_ = true;
  return s;
}

namespace {

// The .npy dtypes a token file may have: unsigned or signed integers, little-endian (a byte needs no order).
struct TokenDtype {
  const char* descr;  // NumPy's dtype.str
  int width;          // bytes per token
  bool is_signed;
};
constexpr TokenDtype kTokenDtypes[] = {{"|u1", 1, false}, {"<u2", 2, false}, {"<u4", 4, false},
                                       {"<i4", 4, true},  {"<u8", 8, false}, {"<i8", 8, true}};

// A token as a file stores it: its magnitude, and whether a signed dtype holds it below 0.
struct TokenValue {
  std::uint64_t value = 0;
  bool negative = false;
  std::string str() const { return fmt::format("{}{}", negative ? "-" : "", value); }
  bool operator<(const TokenValue& o) const {
    if (negative != o.negative) return negative;
    return negative ? value > o.value : value < o.value;
  }
};

// The index-th token of little-endian data of `width`-byte integers.
TokenValue token_at(const char* data, int width, bool is_signed, std::int64_t index) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, data + index * width, static_cast<std::size_t>(width));
  const int unused = 64 - 8 * width;
  if (is_signed) {
    const std::int64_t v = static_cast<std::int64_t>(bits << unused) >> unused;
    if (v < 0) return {static_cast<std::uint64_t>(-(v + 1)) + 1, true};
  }
  return {bits, false};
}

// What a token file's scan when it is opened finds: the first token outside
// [0, vocab) (-1: none), and whether every second token is 0 while another
// is not (int32 or int64 ids read as uint16). Over the file's T's in place.
struct TokenScan {
  std::int64_t outside = -1;
  bool odd_zero = true, even_nonzero = false;
};
template <class T>
TokenScan scan_tokens(const char* data, std::int64_t count, std::int64_t vocab) {
  const T* tokens = reinterpret_cast<const T*>(data);  // the mapping's pages, and the data's offset, are aligned
  TokenScan s;
  for (std::int64_t i = 0; i < count; ++i) {
    const T t = tokens[i];
    bool below = false;
    if constexpr (std::is_signed_v<T>) below = t < 0;
    if (below || static_cast<std::uint64_t>(t) >= static_cast<std::uint64_t>(vocab)) {
      s.outside = i;
      return s;
    }
    if (i % 2 == 0)
      s.even_nonzero = s.even_nonzero || t != 0;
    else
      s.odd_zero = s.odd_zero && t == 0;
  }
  return s;
}
TokenScan scan_tokens(const char* data, int width, bool is_signed, std::int64_t count, std::int64_t vocab) {
  switch (width) {
    case 1: return scan_tokens<std::uint8_t>(data, count, vocab);
    case 2: return scan_tokens<std::uint16_t>(data, count, vocab);
    case 4:
      return is_signed ? scan_tokens<std::int32_t>(data, count, vocab) : scan_tokens<std::uint32_t>(data, count, vocab);
    default:
      return is_signed ? scan_tokens<std::int64_t>(data, count, vocab) : scan_tokens<std::uint64_t>(data, count, vocab);
  }
}

// A NumPy .npy file's data: where it starts, how many tokens it holds and of
// what dtype, from its header (format versions 1 to 3: the magic, the
// version, the header's length, then a Python dict literal); nullopt for a
// file without the magic. Throws kInvalidInput for an array that is not a
// 1-D one of kTokenDtypes in C order, or a file shorter than it says.
struct NpyData {
  std::size_t offset = 0;
  std::int64_t count = 0;
  const TokenDtype* dtype = nullptr;
};
std::optional<NpyData> npy_data(std::string_view bytes, const std::filesystem::path& path) {
  constexpr std::string_view kMagic = "\x93NUMPY";
  const auto fail = [&](const std::string& what) {
    throw_error(ErrorKind::kInvalidInput, fmt::format("{}: {}", path.string(), what));
  };
  if (bytes.substr(0, kMagic.size()) != kMagic) {
    // Raw uint16 unless it says it is a .npy: its header is no tokens.
    if (path.extension() == ".npy") fail("named .npy but not one (no NumPy magic at its start); save it with np.save");
    return std::nullopt;
  }
  if (bytes.size() < 10) fail("a .npy file cut short in its header");
  const auto byte = [&](std::size_t i) { return static_cast<std::uint8_t>(bytes[i]); };
  const int major = byte(6);
  if (major < 1 || major > 3) fail(fmt::format(".npy format version {} (ktune reads 1 to 3)", major));
  const std::size_t length_bytes = major == 1 ? 2 : 4, start = 8 + length_bytes;
  if (bytes.size() < start) fail("a .npy file cut short in its header");
  std::size_t header_length = 0;
  for (std::size_t i = 0; i < length_bytes; ++i) header_length |= std::size_t{byte(8 + i)} << (8 * i);
  if (bytes.size() < start + header_length) fail("a .npy file cut short in its header");
  // NumPy writes a header of a few dozen bytes and reads none past 10000; a longer one is no token file (and its
  // fields are not searched: a regex over it recurses a frame a character).
  constexpr std::size_t kMaxHeader = 10000;
  if (header_length > kMaxHeader)
    fail(fmt::format("a .npy header of {} bytes (NumPy writes and reads at most {})", header_length, kMaxHeader));
  const std::string header(bytes.substr(start, header_length));
  std::smatch m;
  const auto field = [&](const char* pattern) {
    return std::regex_search(header, m, std::regex(pattern)) ? m[1].str() : std::string();
  };
  const std::string descr = field(R"('descr'\s*:\s*'([^']*)')");
  const std::string fortran = field(R"('fortran_order'\s*:\s*(True|False))");
  const std::string shape = field(R"('shape'\s*:\s*\(([^)]*)\))");
  const auto* dtype = std::find_if(std::begin(kTokenDtypes), std::end(kTokenDtypes),
                                   [&](const TokenDtype& t) { return descr == t.descr; });
  if (dtype == std::end(kTokenDtypes)) {
    std::string known;
    for (const TokenDtype& t : kTokenDtypes) known += fmt::format("{}'{}'", known.empty() ? "" : ", ", t.descr);
    fail(fmt::format("a .npy array of dtype '{}'; token files hold unsigned or signed integers ({}: save "
                     "arr.astype(np.uint16), or np.uint32 past 65535 ids)",
                     descr, known));
  }
  if (fortran != "False") fail("a .npy array in Fortran order; save a C-ordered one");
  if (!std::regex_match(shape, m, std::regex(R"(\s*(\d+)\s*,\s*)")))
    fail(fmt::format("a .npy array of shape ({}); token files are 1-D (save arr.reshape(-1))", shape));
  const std::size_t offset = start + header_length, data_bytes = bytes.size() - offset;
  const std::string count = m[1].str();  // digits, any number of them
  const auto width = static_cast<std::size_t>(dtype->width);
  if (count.size() > 18 || std::stoull(count) > data_bytes / width)
    fail(fmt::format("a .npy array of {} tokens in {} bytes of data: the file is cut short", count, data_bytes));
  const NpyData d{offset, static_cast<std::int64_t>(std::stoull(count)), dtype};
  if (d.offset % width != 0)
    fail(fmt::format("a .npy file whose data starts at offset {}, not a multiple of its {}-byte tokens; save it with "
                     "NumPy",
                     d.offset, width));
  return d;
}

}  // namespace

TokenStream TokenStream::from_file(const std::filesystem::path& path, std::int64_t vocab) {
  static_assert(std::endian::native == std::endian::little, "token files are little-endian, read in place");
  TokenStream s;
  s.file_ = std::make_shared<const MappedFile>(path);
  const std::string_view bytes = s.file_->bytes();
  bool raw = false;  // a .npy's dtype is checked in its header
  if (const auto npy = npy_data(bytes, path)) {  // its data 64-byte aligned after the header: a slice of the mapping
    KTUNE_REQUIRE(npy->count >= 2, fmt::format("{}: a .npy array of {} tokens; give at least two", path.string(),
                                               npy->count));
    s.width_ = npy->dtype->width;
    s.signed_ = npy->dtype->is_signed;
    s.begin_ = static_cast<std::int64_t>(npy->offset) / s.width_;
    s.size_ = npy->count;
  } else {
    KTUNE_REQUIRE(bytes.size() % 2 == 0 && bytes.size() >= 4,
                  fmt::format("{}: a raw token file holds uint16 values (at least two), or it is a .npy array "
                              "of integers (np.save); got {} bytes",
                              path.string(), bytes.size()));
    s.size_ = static_cast<std::int64_t>(bytes.size() / 2);
    raw = true;
  }
  // A text corpus given for its tokens: its head holds no control bytes but tabs and line ends, where uint16
  // ids' bytes hold some (ids below 8192 a zero or small high byte, and low bytes of every value) within a few
  // hundred tokens. Refused at any vocabulary (ASCII pairs read as ids below 32383).
  const std::string_view head = bytes.substr(0, 4096);
  const bool text = raw && std::all_of(head.begin(), head.end(), [](char c) {
                      return static_cast<unsigned char>(c) >= 0x20 || c == '\n' || c == '\t' || c == '\r';
                    });
  constexpr const char* kText = "the file reads as text: a token file holds a tokenizer's ids as uint16, "
                                "np.array(ids, dtype=np.uint16).tofile(path)";
  KTUNE_REQUIRE(!text || head.size() < 1024, fmt::format("{}: {}", path.string(), kText));
  const char* data = s.file_->bytes().data() + s.begin_ * s.width_;
  const TokenScan scan = scan_tokens(data, s.width_, s.signed_, s.size(), vocab);
  if (scan.outside >= 0) {
    const std::int64_t i = scan.outside;
    const TokenValue t = token_at(data, s.width_, s.signed_, i);
    // The largest id says what vocabulary the file's tokenizer has.
    TokenValue largest = t;
    for (std::int64_t j = i + 1; j < s.size(); ++j) largest = std::max(largest, token_at(data, s.width_, s.signed_, j));
    throw_error(ErrorKind::kInvalidInput,
                fmt::format("{}: token {} at index {} is outside the vocabulary [0, {}) {}", path.string(), t.str(), i,
                            vocab,
                            text ? fmt::format("({})", kText)
                            : t.negative && largest.value < static_cast<std::uint64_t>(vocab) && !largest.negative
                                ? std::string("(ids are never negative)")
                                : fmt::format("(the file's largest id is {}: the model's --vocab must exceed it)",
                                              largest.str())));
  }
  // int32 or int64 ids (np.int32's tofile) read as uint16 are ids below the
  // vocabulary, every second one 0: a corpus of them trains on half zeros.
  KTUNE_REQUIRE(!raw || s.size() < 16 || !scan.odd_zero || !scan.even_nonzero,
                fmt::format("{}: every second token is 0, as in int32 or int64 token ids read as uint16; raw token "
                            "files hold uint16 (save arr.astype(np.uint16).tofile(path), or np.save(path, arr) for "
                            "a .npy of any integer dtype)",
                            path.string()));
  return s;
}

std::int32_t TokenStream::file_token(std::int64_t at) const {
  // Checked against the vocabulary when the file was opened: an id in [0, vocab).
  return static_cast<std::int32_t>(token_at(file_->bytes().data(), width_, signed_, at).value);
}

void TokenStream::sample(const RunShape& shape, std::mt19937_64& rng, std::vector<std::int32_t>& tokens,
                         std::vector<std::int32_t>& targets) const {
  tokens.resize(shape.tokens());
  targets.resize(shape.tokens());
  // A window and its next token lie within the stream, as CS336's get_batch
  // draws them: one running past a file's end and on from its start would
  // teach a transition the corpus does not hold. The synthetic stream repeats
  // with no seam, so any start serves there.
  KTUNE_REQUIRE(periodic_ || size() > shape.context,
                fmt::format("a stream of {} tokens holds no window of {} and its next token", size(), shape.context));
  std::uniform_int_distribution<std::int64_t> start(0, periodic_ ? size() - 1 : size() - shape.context - 1);
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
  if (file_) file_->require_whole();  // a file cut since it was mapped ends the process where its pages are read
  const std::int64_t n = size();
  for (std::int64_t t = 0; t < count; ++t) {
    tokens[t] = token((start + t) % n);
    targets[t] = token((start + t + 1) % n);
  }
}

std::string TokenStream::fingerprint() const {
  // The ids as little-endian uint32, a fixed number a part: the same ids hash alike in any width a file stores.
  constexpr std::int64_t kChunk = 1 << 16;
  std::vector<std::uint32_t> ids(static_cast<std::size_t>(std::min(kChunk, size_)));
  Hasher h;
  h.add("token ids, uint32");
  for (std::int64_t first = 0; first < size_; first += kChunk) {
    const std::int64_t count = std::min(kChunk, size_ - first);
    for (std::int64_t i = 0; i < count; ++i)  // token() reads any width a file stores
      ids[static_cast<std::size_t>(i)] = static_cast<std::uint32_t>(token(first + i));
    h.add(std::string_view(reinterpret_cast<const char*>(ids.data()), static_cast<std::size_t>(count) * 4));
  }
  return h.hex();
}

std::string TokenStream::bytes_fingerprint() const {
  const auto bytes = [](const auto* first, std::int64_t count) {
    return std::string_view(reinterpret_cast<const char*>(first), static_cast<std::size_t>(count) * sizeof(*first));
  };
  return hash_hex(file_ ? file_->bytes().substr(static_cast<std::size_t>(begin_ * width_),
                                                static_cast<std::size_t>(size_ * width_))
                       : bytes(tokens_.data() + begin_, size_));
}

TokenStream TokenStream::slice(std::int64_t begin, std::int64_t end) const {
  KTUNE_REQUIRE(begin >= 0 && begin + 2 <= end && end <= size_,
                fmt::format("tokens [{}, {}) of a stream of {}: a slice holds two or more of its tokens", begin, end,
                            size_));
  TokenStream s = *this;
  s.periodic_ = false;  // a part of one period has a seam where it would wrap
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
