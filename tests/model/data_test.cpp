// Token streams: a token file is read where it lies, each sampled window is a
// run of the file's tokens with its targets one further, and malformed files
// are refused with one line naming what is wrong.
#include "model/data.hpp"

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string_view>

#include "base/error.hpp"
#include "base/files.hpp"
#include "support.hpp"

namespace model_data_test {

using namespace ktune;
using namespace ktune::model;

namespace {

std::filesystem::path token_file(const std::filesystem::path& dir, const std::string& name,
                                 const std::vector<std::uint16_t>& tokens) {
  return ktune::test::write_tokens(dir / name, tokens);
}

// A .npy file as NumPy writes one: the magic, format version `major`, the
// header's length (2 bytes in version 1, 4 after), the header dict padded
// with spaces and a newline so the data start at a multiple of 64, then the
// data; `data_bytes` of them (default: all of `tokens`').
std::filesystem::path npy_bytes(const std::filesystem::path& dir, const std::string& name, const std::string& data,
                                const std::string& dict, int major = 1, std::size_t data_bytes = std::string::npos) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes = std::string("\x93NUMPY") + static_cast<char>(major) + '\0';
  for (std::size_t i = 0; i < prefix - 8; ++i) bytes += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  bytes += header;
  bytes += data.substr(0, data_bytes);
  write_file_atomic(dir / name, bytes);
  return dir / name;
}
std::filesystem::path npy_file(const std::filesystem::path& dir, const std::string& name,
                               const std::vector<std::uint16_t>& tokens, const std::string& dict, int major = 1,
                               std::size_t data_bytes = std::string::npos) {
  return npy_bytes(dir, name, std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2), dict,
                   major, data_bytes);
}

// `values` as little-endian integers of `width` bytes (two's complement: a negative one's low bytes).
std::string little_endian(const std::vector<std::int64_t>& values, int width) {
  std::string out;
  for (const std::int64_t v : values)
    for (int b = 0; b < width; ++b) out += static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * b)) & 0xff);
  return out;
}
std::string npy_dict(const std::string& descr, std::size_t count) {
  return fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({},), }}", descr, count);
}

// `b` gives `a`'s windows (from the start, inside, and wrapping past the end) and their targets.
void same_windows(const TokenStream& a, const TokenStream& b) {
  std::vector<std::int32_t> at, atargets, bt, btargets;
  for (const std::int64_t start : {std::int64_t{0}, std::int64_t{17}, a.size() - 1}) {
    a.window(start, 40, at, atargets);
    b.window(start, 40, bt, btargets);
    CHECK(at == bt);
    CHECK(atargets == btargets);
  }
}

}  // namespace

TEST_CASE("a .npy array of uint16 (np.save's) is read as the raw file of its tokens is", "[model][data]") {
  const auto dir = test::scratch_dir("token-stream-npy");
  std::vector<std::uint16_t> file(300);
  for (std::size_t i = 0; i < file.size(); ++i) file[i] = static_cast<std::uint16_t>(i * 13 % 1000);
  const TokenStream raw = TokenStream::from_file(token_file(dir, "t.u16", file), 1000);
  const std::string dict = "{'descr': '<u2', 'fortran_order': False, 'shape': (300,), }";
  for (const int major : {1, 2}) {
    INFO("format version " << major);
    const TokenStream npy = TokenStream::from_file(npy_file(dir, "t.npy", file, dict, major), 1000);
    CHECK(npy.size() == 300);
    same_windows(raw, npy);
  }
  const auto refused = [&](const std::string& name, const std::string& d, const char* what, int major = 1,
                           std::size_t data_bytes = std::string::npos) {
    INFO(name);
    CHECK_THROWS_WITH(TokenStream::from_file(npy_file(dir, name, file, d, major, data_bytes), 1000),
                      Catch::Contains(name) && Catch::Contains(what));
  };
  refused("f4.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (150,), }", "dtype '<f4'");
  refused("be.npy", "{'descr': '>u2', 'fortran_order': False, 'shape': (300,), }", "dtype '>u2'");
  refused("f.npy", "{'descr': '<u2', 'fortran_order': True, 'shape': (300,), }", "Fortran order");
  refused("2d.npy", "{'descr': '<u2', 'fortran_order': False, 'shape': (10, 30), }", "shape (10, 30)");
  refused("short.npy", dict, "cut short", 1, 400);
  refused("v9.npy", dict, "format version 9", 9);
  // Counts past int64 (or past the data) are a file cut short, not an overflow.
  refused("huge.npy", "{'descr': '<u2', 'fortran_order': False, 'shape': (99999999999999999999,), }", "cut short");
  refused("max.npy", "{'descr': '<u2', 'fortran_order': False, 'shape': (9223372036854775808,), }", "cut short");
  // A .npy without NumPy's magic is not read as raw tokens (its header would be trained on).
  CHECK_THROWS_WITH(TokenStream::from_file(token_file(dir, "raw.npy", file), 1000), Catch::Contains("no NumPy magic"));
  CHECK_THROWS_WITH(TokenStream::from_file(npy_file(dir, "big.npy", {1, 2, 3000}, "{'descr': '<u2', "
                                                    "'fortran_order': False, 'shape': (3,), }"), 1000),
                    Catch::Contains("token 3000 at index 2"));
}

TEST_CASE("a .npy array of any integer dtype is read as its uint16 twin, uint32 past 65535 ids", "[model][data]") {
  const auto dir = test::scratch_dir("token-stream-npy-dtypes");
  std::vector<std::uint16_t> file(300);
  for (std::size_t i = 0; i < file.size(); ++i) file[i] = static_cast<std::uint16_t>(i * 37 % 250);
  const std::vector<std::int64_t> values(file.begin(), file.end());
  const TokenStream raw = TokenStream::from_file(token_file(dir, "t.u16", file), 250);
  const std::pair<const char*, int> dtypes[] = {{"|u1", 1}, {"<u2", 2}, {"<u4", 4}, {"<i4", 4}, {"<u8", 8}, {"<i8", 8}};
  for (const auto& [descr, width] : dtypes) {
    INFO(descr);
    const TokenStream npy = TokenStream::from_file(
        npy_bytes(dir, "t.npy", little_endian(values, width), npy_dict(descr, values.size())), 250);
    REQUIRE(npy.size() == 300);
    same_windows(raw, npy);
    same_windows(raw.slice(100, 200), npy.slice(100, 200));  // a split of it reads on from where it starts
  }
  // Ids past uint16's, for a vocabulary past 65536, in uint32.
  std::vector<std::int64_t> wide(64);
  for (std::size_t i = 0; i < wide.size(); ++i) wide[i] = 60000 + static_cast<std::int64_t>(i) * 1013;
  const TokenStream u32 = TokenStream::from_file(npy_bytes(dir, "u4.npy", little_endian(wide, 4),
                                                           npy_dict("<u4", wide.size())), 130000);
  std::vector<std::int32_t> tokens, targets;
  u32.window(3, 10, tokens, targets);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    CHECK(tokens[i] == wide[3 + i]);
    CHECK(targets[i] == wide[4 + i]);
  }
  // Every token is checked against the vocabulary, whatever the width: a negative id, and one past it.
  CHECK_THROWS_WITH(TokenStream::from_file(npy_bytes(dir, "neg.npy", little_endian({4, -3, 7}, 4), npy_dict("<i4", 3)),
                                           250),
                    Catch::Contains("token -3 at index 1") && Catch::Contains("ids are never negative"));
  CHECK_THROWS_WITH(TokenStream::from_file(npy_bytes(dir, "big.npy", little_endian({4, 70000, 99999}, 8),
                                                     npy_dict("<i8", 3)),
                                           65536),
                    Catch::Contains("token 70000 at index 1") && Catch::Contains("the file's largest id is 99999"));
  CHECK_THROWS_WITH(TokenStream::from_file(npy_bytes(dir, "u8.npy", little_endian({1, -1}, 8), npy_dict("<u8", 2)),
                                           250),
                    Catch::Contains("token 18446744073709551615 at index 1"));
  // A count the data of its width do not hold is a file cut short.
  CHECK_THROWS_WITH(TokenStream::from_file(npy_bytes(dir, "cut.npy", little_endian({1, 2, 3}, 4), npy_dict("<u4", 4)),
                                           250),
                    Catch::Contains("cut short"));
}

TEST_CASE("a token file's windows are runs of its tokens, targets one token on", "[model][data]") {
  const auto dir = test::scratch_dir("token-stream");
  std::vector<std::uint16_t> file(1000);
  std::mt19937_64 fill(11);
  for (auto& t : file) t = static_cast<std::uint16_t>(fill() % 50000);
  const TokenStream stream = TokenStream::from_file(token_file(dir, "t.u16", file), 50000);
  CHECK(stream.size() == 1000);
  std::mt19937_64 rng(3);
  std::vector<std::int32_t> tokens, targets;
  const RunShape shape{5, 40};
  for (int draw = 0; draw < 20; ++draw) {
    stream.sample(shape, rng, tokens, targets);
    for (std::int64_t b = 0; b < shape.batch; ++b) {
      // Where the window starts: the first offset whose run matches (the data are random, so one does).
      std::int64_t start = -1;
      for (std::int64_t o = 0; o < 1000 && start < 0; ++o) {
        bool all = true;
        for (std::int64_t t = 0; t < shape.context && all; ++t)
          all = tokens[b * shape.context + t] == file[(o + t) % 1000];
        if (all) start = o;
      }
      INFO("draw " << draw << ", window " << b);
      REQUIRE(start >= 0);
      for (std::int64_t t = 0; t < shape.context; ++t)
        CHECK(targets[b * shape.context + t] == file[(start + t + 1) % 1000]);
    }
  }
}

TEST_CASE("a token file cut while a run reads it ends the read in one error naming it, not with SIGBUS, and one "
          "replaced whole is read on as it was",
          "[model][data]") {
  const auto dir = test::scratch_dir("token-stream-cut");
  std::vector<std::uint16_t> file(65536);  // 32 pages: a window past the cut lies in a page the file lost
  std::mt19937_64 fill(5);
  for (auto& t : file) t = static_cast<std::uint16_t>(fill() % 1000);
  const auto path = token_file(dir, "t.u16", file);
  const TokenStream stream = TokenStream::from_file(path, 1000);
  std::mt19937_64 rng(1);
  std::vector<std::int32_t> tokens, targets;
  stream.sample({4, 64}, rng, tokens, targets);
  // Replaced whole (a new file renamed over it): the mapping holds the old one, read on.
  token_file(dir, "t.u16", std::vector<std::uint16_t>(100, 7));
  stream.window(60000, 64, tokens, targets);
  CHECK(tokens[0] == file[60000]);
  // Rewritten in place: cut.
  const TokenStream again = TokenStream::from_file(token_file(dir, "u.u16", file), 1000);
  std::filesystem::resize_file(dir / "u.u16", 100);
  const std::string said = "u.u16 was cut from 131072 to 100 bytes while it was read";
  CHECK_THROWS_WITH(again.window(60000, 64, tokens, targets), Catch::Contains(said));
  CHECK_THROWS_WITH(again.sample({4, 64}, rng, tokens, targets), Catch::Contains(said));
  // Rewritten in place as long (other ids, as `arr.tofile` over it writes them): stopped too.
  const TokenStream third = TokenStream::from_file(token_file(dir, "v.u16", file), 1000);
  third.window(0, 64, tokens, targets);
  {
    std::fstream over(dir / "v.u16", std::ios::in | std::ios::out | std::ios::binary);
    const std::vector<std::uint16_t> others(file.size(), 999);
    over.write(reinterpret_cast<const char*>(others.data()), static_cast<std::streamsize>(others.size() * 2));
  }
  // Its time moved on for sure (a file system's clock may be coarser than the two writes).
  std::filesystem::last_write_time(dir / "v.u16",
                                   std::filesystem::last_write_time(dir / "v.u16") + std::chrono::seconds(1));
  CHECK_THROWS_WITH(third.window(0, 64, tokens, targets),
                    Catch::Contains("v.u16 was written to while it was read (its modification time changed)"));
}

TEST_CASE("malformed token files are refused in one line", "[model][data]") {
  const auto dir = test::scratch_dir("token-stream-bad");
  CHECK_THROWS_WITH(TokenStream::from_file(token_file(dir, "one.u16", {7}), 100),
                    Catch::Contains("at least two") && Catch::Contains("got 2 bytes"));
  write_file_atomic(dir / "odd.u16", "abc");
  CHECK_THROWS_WITH(TokenStream::from_file(dir / "odd.u16", 100), Catch::Contains("got 3 bytes"));
  write_file_atomic(dir / "empty.u16", "");
  CHECK_THROWS_WITH(TokenStream::from_file(dir / "empty.u16", 100), Catch::Contains("got 0 bytes"));
  CHECK_THROWS_WITH(TokenStream::from_file(token_file(dir, "big.u16", {1, 2, 300, 4, 9000, 7}), 256),
                    Catch::Contains("token 300 at index 2 is outside the vocabulary [0, 256) (the file's largest id is "
                                    "9000: the model's --vocab must exceed it)"));
  write_file_atomic(dir / "corpus.txt", "Once upon a time,\n\tthere was a token file.\r\n");  // text, not ids
  CHECK_THROWS_WITH(TokenStream::from_file(dir / "corpus.txt", 10000),
                    Catch::Contains("corpus.txt: token 28239 at index 0 is outside the vocabulary [0, 10000) (the "
                                    "file reads as text: a token file holds a tokenizer's ids as uint16"));
  // A longer one is refused at any vocabulary: ASCII pairs read as uint16 are ids below 32383, within GPT-2's.
  std::string corpus;
  while (corpus.size() < 2000) corpus += "Once upon a time, there was a token file.\n";
  write_file_atomic(dir / "long.txt", corpus);
  CHECK_THROWS_WITH(TokenStream::from_file(dir / "long.txt", 50257),
                    Catch::Contains("long.txt: the file reads as text: a token file holds a tokenizer's ids as "
                                    "uint16"));
  // A header longer than NumPy ever writes or reads (a 'descr' of 100000 characters), refused before it is read:
  // searched by a regex, it overflowed the stack.
  const std::string huge = npy_dict(std::string(100000, 'x'), 3);
  CHECK_THROWS_WITH(TokenStream::from_file(npy_bytes(dir, "huge.npy", std::string(6, '\0'), huge, 2), 100),
                    Catch::Contains("a .npy header of 100") && Catch::Contains("bytes (NumPy writes and reads at most "
                                                                               "10000)"));
  try {
    TokenStream::from_file(dir / "absent.u16", 100);
    FAIL("an absent file was read");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kIo);
    CHECK_THAT(e.what(), Catch::Contains("absent.u16"));
  }
}

TEST_CASE("a raw file of int32 or int64 token ids (every second uint16 0) is refused and not read as uint16",
          "[model][data]") {
  const auto dir = test::scratch_dir("token-stream-wide");
  std::mt19937_64 fill(5);
  for (const int width : {2, 4}) {  // np.int32's and np.int64's tofile: each id, then zero uint16s
    std::vector<std::uint16_t> wide(256 * width, 0);
    for (std::size_t i = 0; i < 256; ++i) wide[i * width] = static_cast<std::uint16_t>(fill() % 1000);
    INFO("ids of " << 2 * width << " bytes");
    CHECK_THROWS_WITH(TokenStream::from_file(token_file(dir, "wide.bin", wide), 1000),
                      Catch::Contains("wide.bin: every second token is 0") && Catch::Contains("np.uint16"));
  }
  // uint16 ids, some of them 0, are read; so is a file of zeros alone.
  std::vector<std::uint16_t> ids(256);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = i % 3 == 0 ? 0 : static_cast<std::uint16_t>(fill() % 1000);
  CHECK(TokenStream::from_file(token_file(dir, "ids.bin", ids), 1000).size() == 256);
  CHECK(TokenStream::from_file(token_file(dir, "zeros.bin", std::vector<std::uint16_t>(64, 0)), 1000).size() == 64);
}

TEST_CASE("a slice of a token stream is a stream of those tokens alone, every window and its next token inside it",
          "[model][data]") {
  const auto dir = test::scratch_dir("token-stream-slice");
  std::vector<std::uint16_t> file(1000);
  for (std::size_t i = 0; i < file.size(); ++i) file[i] = static_cast<std::uint16_t>(i);
  const TokenStream whole = TokenStream::from_file(token_file(dir, "t.u16", file), 1000);
  const TokenStream part = whole.slice(900, 1000);
  CHECK(part.size() == 100);
  std::mt19937_64 rng(4);
  std::vector<std::int32_t> tokens, targets;
  const RunShape shape{8, 30};
  std::int32_t last_first = 0;
  for (int draw = 0; draw < 20; ++draw) {
    part.sample(shape, rng, tokens, targets);
    for (std::int64_t b = 0; b < shape.batch; ++b) {
      // No window runs past the end and on from the start: 999 is never followed by 900.
      const std::int32_t first = tokens[b * shape.context];
      CHECK(first >= 900);
      CHECK(first + shape.context <= 999);
      last_first = std::max(last_first, first);
      for (std::int64_t t = 0; t < shape.context; ++t) {
        INFO("draw " << draw << ", window " << b << ", token " << t);
        CHECK(tokens[b * shape.context + t] == first + t);
        CHECK(targets[b * shape.context + t] == first + t + 1);
      }
    }
  }
  CHECK(last_first >= 960);  // 160 windows over 70 starts: the last ones are drawn too
  CHECK_THROWS_WITH(part.sample(RunShape{1, 100}, rng, tokens, targets),
                    Catch::Contains("a stream of 100 tokens holds no window of 100 and its next token"));
  CHECK(whole.slice(10, 20).slice(5, 10).size() == 5);
  CHECK_THROWS_WITH(whole.slice(0, 1), Catch::Contains("two or more"));
  CHECK_THROWS_WITH(whole.slice(990, 1001), Catch::Contains("a stream of 1000"));
  CHECK_THROWS_WITH(whole.slice(-1, 10), Catch::Contains("two or more"));
}

TEST_CASE("split_tokens: --val-split holds out the corpus's last fraction, each part at least a window",
          "[model][data]") {
  const Split s = split_tokens(6400, 0.1, 32, "t.u16");
  CHECK(s.train == 5760);
  CHECK(s.held_out == 640);
  CHECK(split_tokens(1001, 0.5, 8, "t.u16").held_out == 501);  // rounded to nearest
  CHECK_THROWS_WITH(split_tokens(6400, 0.005, 32, "t.u16"),
                    Catch::Contains("--val-split 0.005 of t.u16's 6400 tokens holds out 32 and trains on 6368") &&
                        Catch::Contains("--ctx + 1 = 33"));
  CHECK_THROWS_WITH(split_tokens(100, 0.9, 32, "t.u16"), Catch::Contains("trains on 10"));
}

}  // namespace model_data_test
