#include "base/safetensors.hpp"

#include <catch2/catch.hpp>
#include <cstring>

#include "base/error.hpp"
#include "base/files.hpp"
#include "support.hpp"

namespace base_safetensors_test {

using namespace ktune;

namespace {

SafeTensor f32(std::vector<std::int64_t> shape, const std::vector<float>& values) {
  SafeTensor t;
  t.dtype = "F32";
  t.shape = std::move(shape);
  t.bytes.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return t;
}

}  // namespace

TEST_CASE("safetensors round-trips and its header follows the format", "[base][safetensors]") {
  TensorFile f;
  f.metadata["format"] = "pt";
  f.add("b", f32({2}, {1.5f, -2}));
  f.add("a", f32({1, 3}, {1, 2, 3}));
  const std::string bytes = serialize_safetensors(f);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);  // little-endian host
  CHECK((8 + n) % 8 == 0);
  CHECK(bytes.substr(8, n).find(R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})") != std::string::npos);
  const TensorFile g = parse_safetensors(bytes, "mem");
  CHECK(g.order == std::vector<std::string>{"b", "a"});
  CHECK(g.at("a").shape == std::vector<std::int64_t>{1, 3});
  CHECK(g.at("b").bytes == f.at("b").bytes);
  CHECK(g.metadata.at("format") == "pt");
  CHECK(serialize_safetensors(g) == bytes);
}

TEST_CASE("malformed safetensors files give one clear error", "[base][safetensors]") {
  CHECK_THROWS_WITH(parse_safetensors("abc", "x.st"), Catch::Contains("x.st is not a valid safetensors file"));
  std::string bytes = serialize_safetensors([] {
    TensorFile f;
    f.add("w", f32({2}, {1, 2}));
    return f;
  }());
  CHECK_THROWS_WITH(parse_safetensors(bytes.substr(0, bytes.size() - 1), "cut.st"),
                    Catch::Contains("outside the data"));
  // Shapes whose byte count overflows to the span given, or comes out right through negative dimensions.
  const auto file = [](const std::string& shape, int data_bytes) {
    const std::string header = R"({"w":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,)" +
                               std::to_string(data_bytes) + "]}}";
    std::string out(8, '\0');
    const std::uint64_t n = header.size();
    std::memcpy(out.data(), &n, 8);  // little-endian host
    return out + header + std::string(static_cast<std::size_t>(data_bytes), '\0');
  };
  REQUIRE(parse_safetensors(file("[1,2]", 8), "ok.st").at("w").shape == std::vector<std::int64_t>{1, 2});
  CHECK_THROWS_WITH(parse_safetensors(file("[4294967296,4294967296]", 0), "big.st"),
                    Catch::Contains("which no file holds"));
  CHECK_THROWS_WITH(parse_safetensors(file("[-1,-2]", 8), "negative.st"), Catch::Contains("which no file holds"));
  CHECK_THROWS_WITH(parse_safetensors(file("[1.5,2]", 8), "fraction.st"), Catch::Contains("which no file holds"));
  // Bytes two tensors share, bytes no tensor holds, and a name given twice.
  const auto tensors = [](const std::string& entries, int data_bytes) {
    const std::string header = "{" + entries + "}";
    std::string out(8, '\0');
    const std::uint64_t n = header.size();
    std::memcpy(out.data(), &n, 8);
    return out + header + std::string(static_cast<std::size_t>(data_bytes), '\0');
  };
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":)";
  const std::string b = R"("b":{"dtype":"F32","shape":[2],"data_offsets":)";
  REQUIRE(parse_safetensors(tensors(a + "[8,16]}," + b + "[0,8]}", 16), "tiled.st").order.size() == 2);
  // An empty tensor at the offset where another starts (as the safetensors library writes a zero-size one),
  // whichever the header names first.
  const std::string empty = R"("e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]})";
  CHECK(parse_safetensors(tensors(a + "[0,8]}," + b + "[8,16]}," + empty, 16), "empty.st").order.size() == 3);
  CHECK(parse_safetensors(tensors(empty + "," + a + "[0,8]}," + b + "[8,16]}", 16), "empty.st").order.size() == 3);
  CHECK_THROWS_WITH(parse_safetensors(tensors(a + "[0,8]}," + b + "[4,12]}", 12), "overlap.st"),
                    Catch::Contains("overlaps the bytes of another"));
  CHECK_THROWS_WITH(parse_safetensors(tensors(a + "[0,8]}," + b + "[12,20]}", 20), "gap.st"),
                    Catch::Contains("bytes 8..12 of the data belong to no tensor"));
  CHECK_THROWS_WITH(parse_safetensors(tensors(a + "[0,8]}", 12), "tail.st"),
                    Catch::Contains("bytes 8..12 of the data belong to no tensor"));
  CHECK_THROWS_WITH(parse_safetensors(tensors(a + "[0,8]}," + a + "[8,16]}", 16), "twice.st"),
                    Catch::Contains("twice.st is not valid input: key 'a' is given twice"));
}

TEST_CASE("a file written a tensor at a time is the file serialised whole, and reads back a tensor at a time",
          "[base][safetensors]") {
  const auto dir = ktune::test::scratch_dir("safetensors-stream");
  TensorFile f;
  f.metadata = {{"format", "pt"}, {"step", "7"}};
  f.add("w", f32({3, 2}, {1, 2, 3, 4, 5, 6}));
  f.add("b", f32({1}, {-0.5f}));
  {
    SafetensorsWriter w(dir / "s.safetensors", {{"w", "F32", {3, 2}}, {"b", "F32", {1}}}, f.metadata);
    w.write(f.at("w").bytes);
    w.write(f.at("b").bytes);
    w.commit();
  }
  CHECK(read_file(dir / "s.safetensors") == serialize_safetensors(f));
  const SafetensorsReader r(dir / "s.safetensors");
  CHECK(r.order() == std::vector<std::string>{"w", "b"});
  CHECK(r.metadata() == f.metadata);
  CHECK(r.read("b").bytes == f.at("b").bytes);
  CHECK(r.read("w").shape == std::vector<std::int64_t>{3, 2});
  CHECK(r.read("w").bytes == f.at("w").bytes);
  CHECK_THROWS_WITH(r.read("x"), Catch::Contains("s.safetensors has no tensor 'x'"));

  // A writer given the wrong bytes, or dropped before its commit, leaves the old file as it was.
  const std::string before = read_file(dir / "s.safetensors");
  {
    SafetensorsWriter w(dir / "s.safetensors", {{"w", "F32", {3, 2}}}, {});
    CHECK_THROWS_AS(w.write("short"), ktune::Error);
    CHECK_THROWS_AS(w.commit(), ktune::Error);
  }
  CHECK(read_file(dir / "s.safetensors") == before);
  CHECK(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()) == 1);

  // The reader refuses what parse_safetensors refuses, naming the file.
  write_file_atomic(dir / "cut.safetensors", before.substr(0, before.size() - 1));
  CHECK_THROWS_WITH(SafetensorsReader(dir / "cut.safetensors"), Catch::Contains("outside the data"));
  CHECK_THROWS_AS(SafetensorsReader(dir / "absent.safetensors"), ktune::Error);
}

}  // namespace base_safetensors_test
