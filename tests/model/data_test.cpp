// Token streams: a token file is read where it lies, each sampled window is a
// run of the file's tokens with its targets one further, and malformed files
// are refused with one line naming what is wrong.
#include "model/data.hpp"

#include <catch2/catch.hpp>

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
  const auto path = dir / name;
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(tokens.data()),
                                           tokens.size() * sizeof(std::uint16_t)));
  return path;
}

}  // namespace

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

TEST_CASE("malformed token files are refused in one line", "[model][data]") {
  const auto dir = test::scratch_dir("token-stream-bad");
  CHECK_THROWS_WITH(TokenStream::from_file(token_file(dir, "one.u16", {7}), 100),
                    Catch::Contains("at least two") && Catch::Contains("got 2 bytes"));
  write_file_atomic(dir / "odd.u16", "abc");
  CHECK_THROWS_WITH(TokenStream::from_file(dir / "odd.u16", 100), Catch::Contains("got 3 bytes"));
  write_file_atomic(dir / "empty.u16", "");
  CHECK_THROWS_WITH(TokenStream::from_file(dir / "empty.u16", 100), Catch::Contains("got 0 bytes"));
  CHECK_THROWS_WITH(TokenStream::from_file(token_file(dir, "big.u16", {1, 2, 300, 4}), 256),
                    Catch::Contains("token 300 at index 2 is outside the vocabulary [0, 256)"));
  try {
    TokenStream::from_file(dir / "absent.u16", 100);
    FAIL("an absent file was read");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kIo);
    CHECK_THAT(e.what(), Catch::Contains("absent.u16"));
  }
}

}  // namespace model_data_test
