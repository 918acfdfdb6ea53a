// Kernel specs read into families: restrictions prune exactly the invalid
// points, bad specs give one clear line (and `ktune` exits 2), expressions
// follow integer geometry, rendering carries the tunables, the source hash
// follows the files, and constructs the emulation lacks are named.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/files.hpp"
#include "spec/spec_family.hpp"
#include "support.hpp"
#include "tuner/compile/compile_check.hpp"

namespace spec_spec_test {

namespace fs = std::filesystem;
using ktune::Config;
using ktune::DeviceLimits;
using ktune::spec::Expression;
using ktune::spec::load_spec_family;
using ktune::templates::Problem;

namespace {

fs::path example(const std::string& name) { return fs::path(KTUNE_SOURCE_DIR) / "examples" / name; }

void write(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

/// The reduction example copied into `dir`, its spec text edited by `edit`.
fs::path reduction_copy(const fs::path& dir, const std::function<void(std::string&)>& edit) {
  fs::copy_file(example("reduction/reduction.cu"), dir / "reduction.cu", fs::copy_options::overwrite_existing);
  std::ifstream in(example("reduction/reduction.json"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  edit(text);
  write(dir / "reduction.json", text);
  return dir / "reduction.json";
}

void replace(std::string& text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  text.replace(pos, from.size(), to);
}

std::string load_error(const fs::path& path) {
  try {
    load_spec_family(path);
  } catch (const ktune::Error& e) {
    CHECK(e.kind() == ktune::ErrorKind::kInvalidInput);
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("spec: the matmul restrictions admit exactly the valid points", "[spec]") {
  const auto& family = load_spec_family(example("matmul/matmul.json"));
  const auto device = DeviceLimits::for_arch("sm_90");
  // k = 40: tile 16 passes every geometry check (k is not in the grid) and only the restriction rejects it.
  for (const auto& [m, n, k] :
       {std::tuple{64, 48, 32}, std::tuple{64, 48, 40}, std::tuple{96, 96, 64}, std::tuple{8, 8, 8}}) {
    const Problem problem{"f32", {{"m", m}, {"n", n}, {"k", k}}};
    std::uint64_t valid = 0, expected = 0;
    for (std::uint64_t i = 0; i < family.space().size(); ++i) {
      const Config c = family.space().at(i);
      const auto tile = c.at("tile"), wpt = c.at("wpt");
      // What the spec's restrictions say, written out in C++.
      const bool ok = tile % wpt == 0 && m % tile == 0 && n % tile == 0 && k % tile == 0 &&
                      2 * tile * tile * 4 <= 48 * 1024 && tile * (tile / wpt) <= 1024;
      INFO(c.str() << " on " << problem.key());
      std::string why;
      CHECK(family.is_valid(c, problem, device, &why) == ok);
      if (!ok) CHECK_FALSE(why.empty());
      valid += family.is_valid(c, problem, device) ? 1 : 0;
      expected += ok ? 1 : 0;
    }
    CHECK(valid == expected);
  }
  // 64 x 48 x 32: tiles 4 (wpt 1, 2, 4), 8 (1, 2, 4, 8), 16 (1, 2, 4, 8); 32 does not divide 48.
  std::uint64_t valid = 0;
  const Problem first = family.problem_classes().front();
  for (std::uint64_t i = 0; i < family.space().size(); ++i)
    valid += family.is_valid(family.space().at(i), first, device);
  CHECK(valid == 11);
  std::string why;
  CHECK_FALSE(family.is_valid(Config({{"tile", 32}, {"wpt", 1}}), first, device, &why));
  CHECK(why == "restriction 'm % tile == 0 && n % tile == 0 && k % tile == 0' does not hold");
}

TEST_CASE("spec: the reduction restrictions and the device's block limit", "[spec]") {
  const auto& family = load_spec_family(example("reduction/reduction.json"));
  const Problem problem = family.problem_classes().front();  // 16 rows of 1020
  auto device = DeviceLimits::for_arch("sm_90");
  std::uint64_t valid = 0;
  for (std::uint64_t i = 0; i < family.space().size(); ++i)
    valid += family.is_valid(family.space().at(i), problem, device);
  // vec 1: threads 32..512; vec 2: 32..256; vec 4: 32..128; vec 8 does not divide 1020.
  CHECK(valid == 12);
  device.max_threads_per_block = 256;
  std::string why;
  CHECK_FALSE(family.is_valid(Config({{"threads", 512}, {"vec", 1}}), problem, device, &why));
  CHECK_THAT(why, Catch::Contains("outside 1..256"));
  // A restriction that divides by zero, where Python would raise: no config, said so.
  const auto dir = ktune::test::scratch_dir("spec-restriction-nan");
  const auto& by_zero = load_spec_family(reduction_copy(dir, [](std::string& t) {
    replace(t, "\"cols % vec == 0\"", "\"cols % (vec - 1) >= 0\"");
  }));
  CHECK_FALSE(by_zero.is_valid(Config({{"threads", 32}, {"vec", 1}}), problem, device, &why));
  CHECK(why == "restriction 'cols % (vec - 1) >= 0': a division by zero here");
  CHECK(by_zero.is_valid(Config({{"threads", 32}, {"vec", 2}}), problem, device, &why));
}

TEST_CASE("spec: a launch past CUDA's limits on an axis (gridDim.y and .z 65535, blockDim.z 64) is no config",
          "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-axis-limits");
  const auto device = DeviceLimits::for_arch("sm_90");
  const Config c({{"threads", 128}, {"vec", 1}});
  const auto& rows_on_y = load_spec_family(reduction_copy(dir, [](std::string& t) {
    replace(t, "\"grid\": \"rows\"", "\"grid\": [\"1\", \"rows\"]");
  }));
  std::string why;
  CHECK(rows_on_y.is_valid(c, Problem{"f32", {{"rows", 65535}, {"cols", 1024}}}, device, &why));
  CHECK_FALSE(rows_on_y.is_valid(c, Problem{"f32", {{"rows", 65536}, {"cols", 1024}}}, device, &why));
  CHECK_THAT(why, Catch::Contains("= 65536 is outside CUDA's limit on gridDim.y, 1..65535"));
  const auto dir_z = ktune::test::scratch_dir("spec-axis-limits-z");
  const auto& threads_on_z = load_spec_family(reduction_copy(dir_z, [](std::string& t) {
    replace(t, "\"block\": \"threads\"", "\"block\": [\"1\", \"1\", \"threads\"]");
  }));
  const Problem problem{"f32", {{"rows", 16}, {"cols", 1024}}};
  CHECK(threads_on_z.is_valid(Config({{"threads", 64}, {"vec", 1}}), problem, device, &why));
  CHECK_FALSE(threads_on_z.is_valid(c, problem, device, &why));
  CHECK_THAT(why, Catch::Contains("= 128 is outside CUDA's limit on blockDim.z, 1..64"));
}

TEST_CASE("spec: expressions do integer geometry and name what they lack", "[spec]") {
  const Expression e("n % (block * vec) == 0 && ceil_div(n, block) == div(n + block - 1, block)", "restriction",
                     {"n", "block", "vec"});
  CHECK(e.eval({{"n", 1024}, {"block", 256}, {"vec", 4}}) == 1);
  CHECK(e.eval({{"n", 1000}, {"block", 256}, {"vec", 4}}) == 0);
  const Expression grid("n / block", "grid[x]", {"n", "block"});
  CHECK(grid.eval_integer({{"n", 1024}, {"block", 256}}, 1, 100) == 4);
  CHECK_THROWS_WITH(grid.eval_integer({{"n", 1000}, {"block", 256}}, 1, 100),
                    Catch::Contains("is not a whole number (use ceil_div(a, b)"));
  CHECK_THROWS_WITH(Expression("block_x * block_z <= 1024", "restriction", {"block_x", "block_y"}),
                    "restriction: unknown name 'block_z'; known: block_x, block_y");
  CHECK_THROWS_WITH(Expression("block_x * (2 <= 1024", "restriction", {"block_x"}), Catch::Contains("restriction: "));
}

double python_mod(double a, double b) { return a - b * std::floor(a / b); }

TEST_CASE("spec: expressions read Python's spelling, as Kernel Tuner's restrictions are written", "[spec]") {
  // Each against the same condition written in C++, over a grid of values.
  using Fn = std::function<bool(double, double)>;
  const std::vector<std::pair<std::string, Fn>> cases = {
      {"32 <= x * y <= 1024", [](double x, double y) { return 32 <= x * y && x * y <= 1024; }},
      {"x < y < x * 2 < 100", [](double x, double y) { return x < y && y < x * 2 && x * 2 < 100; }},
      {"x % 32 == 0 and not y > 4 or x == 1",
       [](double x, double y) { return (std::fmod(x, 32) == 0 && !(y > 4)) || x == 1; }},
      {"not 1 < x < 8", [](double x, double) { return !(1 < x && x < 8); }},
      {"y > 2 and not 1 < x <= 8", [](double x, double y) { return y > 2 && !(1 < x && x <= 8); }},
      {"x // 3 == y ** 2", [](double x, double y) { return std::floor(x / 3) == y * y; }},
      {"2 ** y ** 2 >= x", [](double x, double y) { return std::pow(2, y * y) >= x; }},
      {"min(1 < x < 4, y) == True", [](double x, double y) { return std::min<double>(1 < x && x < 4, y) == 1; }},
      {"(x > 4) == (y > 2) != False", [](double x, double y) { return ((x > 4) == (y > 2)) && ((y > 2) != 0); }},
      {"x > y ? 0 < y < 3 : x == y == 2", [](double x, double y) { return x > y ? 0 < y && y < 3 : x == y && y == 2; }},
      {"x != y >= 2", [](double x, double y) { return x != y && y >= 2; }},
      {"not not x > 4", [](double x, double) { return x > 4; }},
      {"not -x < -4 and (not not y)", [](double x, double y) { return !(-x < -4) && y != 0; }},
      {"(32 - x * y) % 32 == 16", [](double x, double y) { return python_mod(32 - x * y, 32) == 16; }},
      {"(x - 48) % -32 > -16", [](double x, double) { return python_mod(x - 48, -32) > -16; }},
      {"int((y - x) / 3) == -1", [](double x, double y) { return std::trunc((y - x) / 3) == -1; }},
      {"-x // 3 == (y - x) // 3", [](double x, double y) { return std::floor(-x / 3) == std::floor((y - x) / 3); }},
      {"0x10 <= x * 0b1 <= 1_000 and y != 0o7", [](double x, double y) { return 16 <= x && x <= 1000 && y != 7; }},
      {"round(x / 8) == pow(y, 2)", [](double x, double y) { return std::nearbyint(x / 8) == y * y; }},
      {"x < 1.5e2 and y > 1_0.0 - 9", [](double x, double y) { return x < 150 && y > 1; }},
      // A guard keeps its division from running, as Python's short-circuit: no division by zero at y 0.
      {"y == 0 or x % y == 0 and x // y > 2",
       [](double x, double y) { return y == 0 || (std::fmod(x, y) == 0 && std::floor(x / y) > 2); }},
      {"y != 0 and not x % y or x > 100 and y == 0",
       [](double x, double y) { return (y != 0 && std::fmod(x, y) == 0) || (x > 100 && y == 0); }},
      {"(y and x // y > 4) == (y > 0 && x / y >= 5)", [](double, double) { return true; }},
      {"x in (1, 2, 32) or y not in [0, 1, 2 * 2] and x in (4,)",
       [](double x, double y) { return x == 1 || x == 2 || x == 32 || (y != 0 && y != 1 && y != 4 && x == 4); }},
      {"not x in (min(y, 3), 64) and 2 < y in [3, 5]",
       [](double x, double y) { return x != std::min(y, 3.0) && x != 64 && 2 < y && (y == 3 || y == 5); }},
  };
  for (const auto& [text, expected] : cases) {
    const Expression e(text, "restriction", {"x", "y"});
    for (double x : {1, 2, 3, 4, 5, 8, 12, 31, 32, 33, 64, 96, 128, 512})
      for (double y = 0; y <= 8; ++y) {
        INFO(text << " at x " << x << ", y " << y);
        CHECK(e.eval({{"x", x}, {"y", y}}) == (expected(x, y) ? 1 : 0));
      }
  }
  // Whole words only: names that start or end with one are names.
  const Expression words("order and nothing or notably", "restriction", {"order", "nothing", "notably"});
  CHECK(words.eval({{"order", 1}, {"nothing", 0}, {"notably", 0}}) == 0);
  CHECK(words.eval({{"order", 1}, {"nothing", 2}, {"notably", 0}}) == 1);
  CHECK(words.text() == "order and nothing or notably");
  // A syntax error is found in the text as written.
  CHECK_THROWS_WITH(Expression("x and (y", "restriction", {"x", "y"}), Catch::Contains("restriction: "));
  CHECK_THROWS_WITH(Expression("x < y <", "restriction", {"x", "y"}), Catch::Contains("restriction: "));
  CHECK_THROWS_WITH(Expression("x = 64", "restriction", {"x"}),
                    "restriction: '=' at position 2 would assign; write '==' to compare");
  CHECK_THROWS_WITH(Expression("x += 1", "restriction", {"x"}), Catch::Contains("'=' at position 3 would assign"));
  CHECK_THROWS_WITH(Expression("x & 1 == 0", "restriction", {"x"}),
                    "restriction: '&' at position 2 is no operator of the expressions");
  CHECK_THROWS_WITH(Expression("not", "restriction", {"x"}), "restriction: incomplete expression");
  CHECK_THROWS_WITH(Expression("x =< 4", "restriction", {"x"}),
                    "restriction: '=' at position 2 would assign; write '==' to compare (or '<=' for '=<')");
  CHECK_THROWS_WITH(Expression("x \u2264 4", "restriction", {"x"}),
                    "restriction: '\u2264' at position 2 is no operator of the expressions");
  CHECK_THROWS_WITH(Expression("x if y else 4", "restriction", {"x", "y"}),
                    Catch::EndsWith("(Python's conditional 'x if c else y' is not read: write c ? x : y)"));
  // An unclosed parenthesis within an `in` list is no list that closes it.
  CHECK_THROWS_WITH(Expression("x in (1, (3)", "restriction", {"x"}),
                    "restriction: '(' at position 5 is never closed");
  CHECK_THROWS_WITH(Expression("x not in [1, 3", "restriction", {"x"}),
                    "restriction: '[' at position 9 is never closed");
  CHECK_THROWS_WITH(Expression("x in (1, 3))", "restriction", {"x"}),
                    "restriction: ')' at position 11 closes nothing");
  CHECK(Expression("x in (1, (3))", "restriction", {"x"}).eval({{"x", 3}}) == 1);
  CHECK_THROWS_WITH(Expression("x in y", "restriction", {"x", "y"}),
                    "restriction: unknown name 'in'; known: x, y ('in' takes a parenthesized or bracketed list of "
                    "values: a in (1, 2))");
  // muparser's constants are no names of its: a tunable may take them.
  CHECK(Expression("_pi * 2 + _e", "restriction", {"_pi", "_e"}).eval({{"_pi", 3}, {"_e", 1}}) == 7);
  // Python's floor division of floats: 1 // 0.1 is 9.0 (the remainder 0.0999...), not floor(1 / 0.1).
  CHECK(Expression("x // 0.1", "restriction", {"x"}).eval({{"x", 1}}) == 9);
  CHECK(Expression("0x_1f + 0b1_0", "restriction", {"x"}).eval({{"x", 1}}) == 33);
  // A division by zero of constants loads (the parse folds nothing) and is said where it is evaluated.
  const Expression by_zero("x + 1 // 0", "restriction", {"x"});
  CHECK(by_zero.uses("x"));
  CHECK_THROWS_WITH(by_zero.eval({{"x", 1}}), "restriction: a division by zero here");
  CHECK_THROWS_WITH(Expression("1 // 0 + typo", "restriction", {"x"}), Catch::Contains("unknown name 'typo'"));
  CHECK(ktune::spec::is_expression_word("not"));
  CHECK_FALSE(ktune::spec::is_expression_word("note"));
}

TEST_CASE("spec: a scalar argument outside its type's range refuses the launch", "[spec]") {
  const auto& family = load_spec_family(example("reduction/reduction.json"));  // cols goes as an i32
  const auto device = DeviceLimits::for_arch("sm_90");
  const Config c({{"threads", 128}, {"vec", 4}});
  const std::vector<std::uint64_t> addresses = {0x10000, 0x20000};
  CHECK(family.plan(c, Problem{"f32", {{"rows", 2}, {"cols", 2147483644}}}, addresses, device).size() == 1);
  // 2^32 + 4 columns reached the kernel as the int 4.
  CHECK_THROWS_WITH(family.plan(c, Problem{"f32", {{"rows", 2}, {"cols", 4294967300}}}, addresses, device),
                    Catch::Contains("args[2] value 'cols' = 4294967300 is outside the range of i32, "
                                    "-2147483648..2147483647"));
}

TEST_CASE("spec: candidates are read in order, unset tunables at their first value", "[spec]") {
  const auto& family = load_spec_family(example("matmul/matmul.json"));
  const Problem big{"f32", {{"m", 2048}, {"n", 2048}, {"k", 2048}}};
  const auto candidates = family.candidates(big);
  REQUIRE(candidates.size() == 2);
  CHECK(candidates[0] == Config({{"tile", 32}, {"wpt", 4}}));
  CHECK(candidates[1] == Config({{"tile", 16}, {"wpt", 4}}));
  const auto dir = ktune::test::scratch_dir("spec-candidates");
  const auto path = reduction_copy(dir, [](std::string& t) {
    replace(t, "\"default\"", "\"candidates\": [{\"vec\": 2}],\n  \"default\"");
  });
  const auto& reduction = load_spec_family(path);
  const auto& space = reduction.space();
  REQUIRE(reduction.candidates(reduction.problem_classes().front()).size() == 1);
  const Config c = reduction.candidates(reduction.problem_classes().front()).front();
  CHECK(c.at("vec") == 2);
  CHECK(c.at("threads") == space.param("threads").values.front());
}

TEST_CASE("spec: the tunables keep the file's order", "[spec]") {
  // Kernel Tuner's tune_params are ordered: the space lists and walks them as written, not alphabetically.
  const auto dir = ktune::test::scratch_dir("spec-order");
  const auto path = reduction_copy(dir, [](std::string& t) {
    replace(t, "\"tunables\": {", "\"tunables\": {\"zeta\": [1, 2], ");
  });
  const auto& params = load_spec_family(path).space().params();
  REQUIRE(params.size() == 3);
  CHECK(params[0].name == "zeta");
  CHECK(params[1].name == "threads");
  CHECK(params[2].name == "vec");
}

TEST_CASE("spec: a kernel's template argument that is no whole number makes the config invalid", "[spec]") {
  // As a grid of 12.5 blocks: no template instance is named "row_sum<128, 0.5>".
  const auto dir = ktune::test::scratch_dir("spec-template-whole");
  const auto path = reduction_copy(dir, [](std::string& t) { replace(t, "{vec}>", "{vec / 2}>"); });
  const auto& family = load_spec_family(path);
  const auto problem = family.problem_classes().front();
  const auto device = DeviceLimits::for_arch("sm_90");
  std::string why;
  CHECK_FALSE(family.is_valid(Config({{"threads", 128}, {"vec", 1}}), problem, device, &why));
  CHECK_THAT(why, Catch::Contains("template argument") && Catch::Contains("= 0.5 is not a whole number"));
  CHECK(family.is_valid(Config({{"threads", 128}, {"vec", 2}}), problem, device, &why));
  CHECK(family.render(Config({{"threads", 128}, {"vec", 2}}), problem).kernels.at(0) == "row_sum<128, 1>");
}

TEST_CASE("spec: a define or scalar argument that fails for a config makes the config invalid, saying why",
          "[spec]") {
  // As a template argument: a division by zero, or a value an integer argument cannot take, is no config's.
  const auto dir = ktune::test::scratch_dir("spec-define-arg-valid");
  const auto path = reduction_copy(dir, [](std::string& t) {
    replace(t, "\"grid\"", "\"defines\": {\"STEPS\": \"cols // (threads - 64)\", \"SCALE\": \"1 / (vec - 4)\"},\n  "
                           "\"grid\"");
    replace(t, "{\"type\": \"i32\", \"value\": \"cols\"}", "{\"type\": \"i32\", \"value\": \"cols / threads\"}");
  });
  const auto& family = load_spec_family(path);
  const Problem problem{"f32", {{"rows", 2}, {"cols", 1024}}};
  const auto device = DeviceLimits::for_arch("sm_90");
  std::string why;
  CHECK(family.is_valid(Config({{"threads", 128}, {"vec", 2}}), problem, device, &why));
  CHECK_FALSE(family.is_valid(Config({{"threads", 64}, {"vec", 2}}), problem, device, &why));
  CHECK(why == "define STEPS 'cols // (threads - 64)': a division by zero here");
  CHECK_FALSE(family.is_valid(Config({{"threads", 128}, {"vec", 4}}), problem, device, &why));
  CHECK(why == "define SCALE '1 / (vec - 4)' = inf is not a finite number (a division by zero?)");
  CHECK_FALSE(family.is_valid(Config({{"threads", 128}, {"vec", 2}}), Problem{"f32", {{"rows", 2}, {"cols", 1000}}},
                              device, &why));
  CHECK_THAT(why, Catch::StartsWith("args[2] value 'cols / threads' = 7.8125 is not a whole number"));
  // Rendered, the define is a number: never inf or nan.
  CHECK_THROWS_WITH(family.render(Config({{"threads", 128}, {"vec", 4}}), problem),
                    Catch::Contains("define SCALE '1 / (vec - 4)' = inf is not a finite number"));
  CHECK_THAT(family.render(Config({{"threads", 128}, {"vec", 2}}), problem).source,
             Catch::Contains("#define SCALE -0.5\n#define STEPS 16\n"));
}

TEST_CASE("spec: run-time parameters are a scalar argument's alone and render lists them", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-parameters");
  write(dir / "sc.cu", "__global__ void scale(const float* x, float* y, float a, int n) {\n"
                       "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = a * x[i];\n}\n");
  const auto spec = [&](const std::string& file, const std::string& grid) {
    write(dir / file, R"json({"name": "scale_p", "source": "sc.cu", "kernel": "scale", "problem": {"n": 100},
      "tunables": {"block": [64]}, "grid": ")json" + grid + R"json(", "block": "block",
      "buffers": [{"name": "x", "count": "n"}, {"name": "y", "count": "n", "role": "output"}],
      "args": ["x", "y", {"type": "f32", "value": "alpha"}, {"type": "i32", "value": "n"}],
      "parameters": {"alpha": 2.5}, "reference": {"config": {"block": 64}}})json");
    return dir / file;
  };
  // The geometry is the config's and the problem's: a parameter there is said to be one, not an unknown name.
  CHECK_THAT(load_error(spec("grid.json", "ceil_div(n, block * alpha)")),
             Catch::Contains("grid 'ceil_div(n, block * alpha)': 'alpha' is a run-time parameter; only a scalar "
                             "argument's value may name it"));
  std::string out;
  REQUIRE(ktune::test::run_command(ktune::test::ktune_exe().string() + " render --space --spec " +
                                       spec("ok.json", "ceil_div(n, block)").string(),
                                   &out) == 0);
  CHECK_THAT(out, Catch::Contains("run-time parameters (their values in checks and tuning; a program gives its own "
                                  "at launch):\n  alpha = 2.5\n"));
  // A parameter no argument reads would reach no kernel: refused, named.
  const auto unused = dir / "unused.json";
  std::string text = ktune::read_file(spec("base.json", "ceil_div(n, block)"));
  const std::string from = "\"parameters\": {\"alpha\": 2.5}";
  REQUIRE(text.find(from) != std::string::npos);
  text.replace(text.find(from), from.size(), "\"parameters\": {\"alpha\": 2.5, \"eps\": 1e-5}");
  write(unused, text);
  CHECK_THAT(load_error(unused), Catch::Contains("parameter 'eps' is read by no argument's value"));
}

TEST_CASE("spec: bad specs give one line naming what is wrong", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-bad");
  SECTION("unknown tunable in a restriction") {
    const auto path =
        reduction_copy(dir, [](std::string& t) { replace(t, "threads * vec <= cols", "thread * vec <= cols"); });
    CHECK(load_error(path) ==
          path.string() +
              ": restriction 'thread * vec <= cols': unknown name 'thread'; known: cols, rows, threads, vec");
  }
  SECTION("an argument naming a missing buffer") {
    const auto path =
        reduction_copy(dir, [](std::string& t) { replace(t, "\"args\": [\"x\", \"y\"", "\"args\": [\"x\", \"out\""); });
    CHECK_THAT(load_error(path), Catch::StartsWith(path.string() + ": args[1]: no buffer 'out'; buffers: x, y"));
  }
  SECTION("a kernel name its sources do not declare") {
    const auto path = reduction_copy(dir, [](std::string& t) { replace(t, "\"row_sum<", "\"row_summ<"); });
    CHECK_THAT(load_error(path), Catch::StartsWith(path.string() + ": kernel 'row_summ<") &&
                                     Catch::Contains(": no 'row_summ' in its sources (reduction.cu)"));
  }
  SECTION("a buffer no argument passes") {
    const auto path = reduction_copy(dir, [](std::string& t) {
      replace(t, "{\"name\": \"y\",", "{\"name\": \"unused\", \"count\": \"rows\", \"role\": \"output\"},\n"
                                        "    {\"name\": \"y\",");
    });
    CHECK(load_error(path) == path.string() + ": buffer 'unused' is passed by no argument, so no kernel would see "
                                              "it; name it in 'args'");
  }
  SECTION("a define the source writes again, unguarded") {
    const auto path = reduction_copy(dir, [](std::string& t) {
      replace(t, "\"reference\":", "\"defines\": {\"WIDTH\": \"cols\"}, \"reference\":");
    });
    const fs::path source = path.parent_path() / "reduction.cu";
    const std::string kernel = ktune::read_file(source);
    write(source, "#define WIDTH 4096\n" + kernel);
    CHECK(load_error(path) == path.string() + ": define 'WIDTH': the source defines it again ('#define WIDTH 4096'), "
                                              "and that value is the one compiled; put the source's under #ifndef "
                                              "WIDTH, or drop it");
    write(source, "#ifndef WIDTH\n#define WIDTH 4096\n#endif\n" + kernel);
    CHECK_NOTHROW(load_spec_family(path));
    write(source, "#ifdef WIDTH\n#else\n#define WIDTH 4096\n#endif\n" + kernel);
    CHECK_NOTHROW(load_spec_family(path));
  }
  SECTION("a __constant__ variable no buffer fills") {
    const auto path = reduction_copy(dir, [](std::string&) {});
    const fs::path source = path.parent_path() / "reduction.cu";
    const std::string kernel = ktune::read_file(source);
    write(source, "__constant__ float scale[4];\n" + kernel);
    CHECK(load_error(path) == path.string() + ": __constant__ 'scale' has no initializer and no buffer fills it, so "
                                              "every launch would read zeros; give an input buffer \"constant\": "
                                              "\"scale\"");
    write(source, "__constant__ float scale[4] = {1, 2, 3, 4};\nextern __constant__ float other[4];\n" + kernel);
    CHECK_NOTHROW(load_spec_family(path));
  }
  SECTION("a tunable named as a word of the expressions") {
    const auto path = reduction_copy(dir, [](std::string& t) { replace(t, "\"vec\"", "\"or\""); });
    CHECK_THAT(load_error(path), Catch::StartsWith(path.string() + ": tunable 'or' is a word of the expressions"));
  }
  SECTION("a tunable value listed twice") {
    const auto path = reduction_copy(dir, [](std::string& t) { replace(t, "[1, 2, 4, 8]", "[1, 2, 4, 4, 8]"); });
    CHECK(load_error(path) == path.string() + ": tunable 'vec': value 4 is listed twice");
  }
  SECTION("a kernel name only in a comment, or as the source file's name in a #line marker") {
    for (const std::string name : {"reduction", "summed"}) {
      INFO(name);
      const auto path = reduction_copy(dir, [&](std::string& t) { replace(t, "\"row_sum<", "\"" + name + "<"); });
      std::ofstream(dir / "reduction.cu", std::ios::app) << "// summed: once a row\n/* summed\n   again */\n";
      CHECK_THAT(load_error(path), Catch::StartsWith(path.string() + ": kernel '" + name + "<") &&
                                       Catch::Contains(": no '" + name + "' in its sources (reduction.cu)"));
    }
  }
  SECTION("a JSON syntax error") {
    const auto path = reduction_copy(dir, [](std::string& t) { replace(t, "\"rows\",", "\"rows\""); });
    CHECK_THAT(load_error(path), Catch::Contains("line 14"));
  }
  SECTION("an expression syntax error") {
    const auto path =
        reduction_copy(dir, [](std::string& t) { replace(t, "\"cols % vec == 0\"", "\"cols % (vec == 0\""); });
    CHECK_THAT(load_error(path), Catch::StartsWith(path.string() + ": restriction 'cols % (vec == 0': "));
  }
  SECTION("a misspelt field") {
    const auto path = reduction_copy(dir, [](std::string& t) { replace(t, "\"restrictions\"", "\"restriction\""); });
    CHECK_THAT(load_error(path), Catch::Contains("spec: unknown field 'restriction'; accepted: "));
  }
  SECTION("a candidate off the space") {
    const auto path = reduction_copy(dir, [](std::string& t) {
      replace(t, "\"default\"", "\"candidates\": [{\"threads\": 64}, {\"threads\": 96}],\n  \"default\"");
    });
    CHECK_THAT(load_error(path), Catch::StartsWith(path.string() + ": candidates[1]: "));
  }
  SECTION("an output given an init (a kernel that accumulates into it needs role inout)") {
    const auto path = reduction_copy(dir, [](std::string& t) {
      replace(t, "\"role\": \"output\"", "\"role\": \"output\", \"init\": \"zeros\"");
    });
    CHECK(load_error(path) == path.string() +
                                  ": buffer 'y': an output starts poisoned (all bits set) before every checked run, so "
                                  "it takes no init; a kernel that reads it first (accumulates into it: +=, atomicAdd) "
                                  "needs role inout (with init zeros to start from 0)");
  }
  SECTION("a buffer count out of range for the problem, found when its inputs are made") {
    const auto path = reduction_copy(dir, [](std::string& t) {
      replace(t, "\"count\": \"rows * cols\"", "\"count\": \"rows * cols - 100000\"");
    });
    const auto& family = load_spec_family(path);
    CHECK_THROWS_WITH(family.make_workload(family.problem_classes().front(), 1),
                      Catch::StartsWith(path.string() + ": buffer 'x' count 'rows * cols - 100000' = -83680 is "
                                                        "outside ") &&
                          Catch::EndsWith(" (for f32;cols=1020;rows=16)"));
  }
  SECTION("no tunable") {
    const auto path = reduction_copy(dir, [](std::string& t) {
      replace(t, "\"threads\": {\"values\": [32, 64, 128, 256, 512, 1024], \"about\": \"threads per row\"},\n"
                 "    \"vec\": {\"values\": [1, 2, 4, 8], \"about\": \"consecutive values per step\"}",
              "");
    });
    CHECK_THAT(load_error(path), Catch::Contains("'tunables' is empty: a spec tunes at least one parameter"));
  }
  SECTION("an unclosed parenthesis in an 'in' list") {
    const auto path = reduction_copy(dir, [](std::string& t) {
      replace(t, "\"cols % vec == 0\"", "\"vec in (1, (2, 4, 8)\"");
    });
    CHECK(load_error(path) ==
          path.string() + ": restriction 'vec in (1, (2, 4, 8)': '(' at position 7 is never closed");
  }
  SECTION("a dimension that is no identifier") {
    const auto path = reduction_copy(dir, [](std::string& t) { replace(t, "\"cols\": 1020", "\"cols-1\": 1020"); });
    CHECK(load_error(path) ==
          path.string() + ": problem: dimension 'cols-1' must be an identifier (letters, digits, _)");
  }
  SECTION("a missing source") {
    const auto path = reduction_copy(dir, [](std::string& t) { replace(t, "reduction.cu", "reduce.cu"); });
    CHECK_THAT(load_error(path), Catch::Contains("source 'reduce.cu' does not exist"));
    fs::create_directory(dir / "reduce.cu");  // a folder by that name is said to be one
    CHECK_THAT(load_error(path), Catch::Contains("source 'reduce.cu' is a folder, not a file"));
  }
  SECTION("the command line: exit 2, one line, nothing written") {
    const auto path =
        reduction_copy(dir, [](std::string& t) { replace(t, "threads * vec <= cols", "thread * vec <= cols"); });
    std::string out;
    const int rc = ktune::test::run_command(ktune::test::ktune_exe().string() + " tune --backend emu --spec " +
                                                path.string() + " --cache " + (dir / "tuned.json").string() + " 2>&1",
                                            &out);
    CHECK(rc == 2);
    CHECK(out == "ktune: " + path.string() +
                     ": restriction 'thread * vec <= cols': unknown name 'thread'; known: cols, rows, threads, vec\n");
    CHECK_FALSE(fs::exists(dir / "tuned.json"));
  }
}

TEST_CASE("spec: a default that breaks a restriction is said when render shows the one measured instead", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-bad-default");
  const auto path = reduction_copy(dir, [](std::string& t) {
    replace(t, "\"default\": {\"threads\": 128, \"vec\": 4}", "\"default\": {\"threads\": 1024, \"vec\": 4}");
  });
  std::string out;
  REQUIRE(ktune::test::run_command(ktune::test::ktune_exe().string() + " render --space --spec " + path.string(),
                                   &out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("default on sm_90: {") &&
                      Catch::Contains(" (stands in for the default {\"threads\":1024,\"vec\":4}, which is not "
                                      "valid here: ") &&
                      Catch::Contains("threads * vec <= cols"));
  // And tune, whose speed-ups are over the config that stands in.
  REQUIRE(ktune::test::run_command(ktune::test::ktune_exe().string() + " tune --backend emu --budget 2 --spec " +
                                       path.string() + " --cache " + (dir / "c.json").string() + " --log " +
                                       (dir / "s.log").string(),
                                   &out) == 0);
  CHECK_THAT(out, Catch::Contains("note: row_sum on f32;cols=1020;rows=16: the default {\"threads\":1024,\"vec\":4} "
                                  "is not valid on sm_90 (restriction 'threads * vec <= cols' does not hold); {"));
  // And run, on the config that stands in.
  REQUIRE(ktune::test::run_command(ktune::test::ktune_exe().string() + " run --backend emu --spec " + path.string(),
                                   &out) == 0);
  CHECK_THAT(out, Catch::Contains(" (stands in for the default {\"threads\":1024,\"vec\":4}, which is not valid "
                                  "here: restriction 'threads * vec <= cols' does not hold)\n"));
  // The spec's own default, valid: no note.
  const auto valid = reduction_copy(ktune::test::scratch_dir("spec-good-default"), [](std::string&) {});
  REQUIRE(ktune::test::run_command(ktune::test::ktune_exe().string() + " render --space --spec " + valid.string(),
                                   &out) == 0);
  CHECK_THAT(out, Catch::Contains("default on sm_90: {\"threads\":128,\"vec\":4}\n"));
}

TEST_CASE("spec: rendering carries the tunables, the hash follows the files", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-render");
  const auto path = reduction_copy(dir, [](std::string& t) {
    replace(t, "\"grid\": \"rows\"", "\"defines\": {\"ROW_VEC\": \"vec * 2\"}, \"grid\": \"rows\"");
  });
  const auto& family = load_spec_family(path);
  const auto r = family.render(Config({{"threads", 128}, {"vec", 4}}), family.problem_classes().front());
  REQUIRE(r.kernels.size() == 1);
  CHECK(r.kernels[0] == "row_sum<128, 4>");
  CHECK_THAT(r.source, Catch::Contains("#define ROW_VEC 8\n"));
  CHECK_THAT(r.source, Catch::Contains("__shfl_down_sync"));
  CHECK_THAT(r.source, Catch::Contains("reinterpret_cast<void*>(&row_sum<128, 4>)"));
  const std::string before = family.source_hash();
  CHECK(load_spec_family(path).source_hash() == before);
  std::ofstream(dir / "reduction.cu", std::ios::app) << "// edited\n";
  CHECK(load_spec_family(path).source_hash() != before);
  // The words for people, the layout and a run-time parameter's value in checks are not the kernel: a reworded
  // summary or about, a re-indented spec, another check value keep its tuned entries. A restriction does not.
  const std::string edited = load_spec_family(path).source_hash();
  auto j = nlohmann::ordered_json::parse(ktune::read_file(path));
  j["summary"] = "reworded";
  write(path, j.dump(4));
  CHECK(load_spec_family(path).source_hash() == edited);
  // Keys in another order (a formatter's sort_keys) say the same spec.
  write(path, nlohmann::json::parse(ktune::read_file(path)).dump(2));
  CHECK(load_spec_family(path).source_hash() == edited);
  j = nlohmann::ordered_json::parse(ktune::read_file(path));
  // Nor is what chooses what is measured first or how it is reported: an entry is keyed by its problem.
  j["problem"] = {{"rows", 8}, {"cols", 512}};
  j["problems"] = nlohmann::ordered_json::array({{{"rows", 4}, {"cols", 256}}});
  j["default"] = {{"threads", 64}, {"vec", 2}};
  j["candidates"] = nlohmann::ordered_json::array({{{"threads", 256}}});
  j["flops"] = "2 * rows * cols";
  j["bytes"] = "4 * rows * cols";
  write(path, j.dump());
  CHECK(load_spec_family(path).source_hash() == edited);
  // The check is: another tolerance may take or refuse a variant.
  j["tolerance"] = 1e-4;
  write(path, j.dump());
  CHECK(load_spec_family(path).source_hash() != edited);
  j.erase("tolerance");
  j["restrictions"].push_back("vec <= 4");
  write(path, j.dump());
  CHECK(load_spec_family(path).source_hash() != edited);
}

TEST_CASE("spec: compile fails a problem no config of whose space is valid, as run and tune refuse it", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-compile-none-valid");
  const auto path = reduction_copy(dir, [](std::string& t) {
    replace(t, "\"threads * vec <= cols\"", "\"threads * vec <= cols\", \"vec > 100\"");
  });
  ktune::tuner::CompileCheckOptions o;
  o.arch = "sm_90";
  const auto s = ktune::tuner::compile_check({&load_spec_family(path)}, o, ktune::tuner::Compiler());
  REQUIRE(s.rows.size() == 1);
  CHECK(s.failures == 1);
  CHECK(s.rows[0].is_default);
  CHECK(s.rows[0].failure ==
        "default config not valid here (restriction 'vec > 100' does not hold); no config of the space is");
  CHECK(s.unique_sources == 0);  // nothing compiled, and the summary says so
  CHECK(s.not_compiled == 1);
  CHECK_THAT(s.line(), Catch::StartsWith("compiled 0 variants (0 unique sources"));
  std::string out;
  CHECK(ktune::test::run_command(ktune::test::ktune_exe().string() + " compile --spec " + path.string() + " 2>&1",
                                 &out) == 1);
  CHECK_THAT(out, Catch::Contains("FAIL row_sum") && Catch::Contains("1 failures"));
}

TEST_CASE("spec: compile compiles, and runs no reference", "[spec]") {
  // A reference that leaves outputs unwritten fails run and tune; compile never runs it (a matmul's reference,
  // emulated at a real problem's size, took minutes there).
  const auto dir = ktune::test::scratch_dir("spec-compile-no-reference");
  const auto path = reduction_copy(dir, [](std::string& t) {
    replace(t, "\"reference\": {\"config\": {\"threads\": 32, \"vec\": 1}}",
            "\"reference\": {\"kernel\": \"row_sum<32, 1>\", \"grid\": 1, \"block\": 32}");
  });
  ktune::tuner::CompileCheckOptions o;
  o.arch = "sm_90";
  const auto s = ktune::tuner::compile_check({&load_spec_family(path)}, o, ktune::tuner::Compiler());
  CHECK(s.failures == 0);
  CHECK(s.rows.size() == 1);
  CHECK_THROWS_WITH(load_spec_family(path).make_workload(load_spec_family(path).problem_classes().front(), 1),
                    Catch::Contains("left NaN or Inf in buffer 'y'"));
}

TEST_CASE("spec: constructs the emulation lacks are named with their line", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-gaps");
  const auto path = reduction_copy(dir, [](std::string&) {});
  write(dir / "reduction.cu", "#ifndef KT_EMULATION\n#include <cuda_runtime.h>\n#endif\n"
                              "template <int THREADS, int VEC>\n"
                              "__global__ void row_sum(const float* x, float* y, int cols) {\n"
                              "  extern __shared__ float partial[];\n"
                              "  if (__activemask() == 0xffffffffu) y[blockIdx.x] = partial[0];\n}\n");
  const auto& family = load_spec_family(path);
  REQUIRE(family.emulation_gaps().size() == 2);
  CHECK_THAT(family.emulation_gaps()[0], Catch::StartsWith("reduction.cu:6: extern __shared__"));
  CHECK_THAT(family.emulation_gaps()[1], Catch::StartsWith("reduction.cu:7: __activemask()"));
  CHECK_THROWS_WITH(family.require_emulation(),
                    Catch::Contains("the emulation cannot run this kernel: reduction.cu:6"));
}

TEST_CASE("spec: extern __shared__ with attributes, asm's other spellings and names the emulation lacks are named",
          "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-gaps-spellings");
  const auto path = reduction_copy(dir, [](std::string&) {});
  write(dir / "reduction.cu", "template <int THREADS, int VEC>\n"
                              "__global__ void row_sum(const float* x, float* y, int cols) {\n"
                              "  extern __align__(16) __shared__ float partial[];\n"
                              "  asm __volatile__(\"membar.gl;\");\n"
                              "  __asm__(\"membar.gl;\");\n"
                              "  y[blockIdx.x] = __fmul_rz(x[0], x[1]) + __dp4a(1, 2, 3);\n"
                              "  y[0] = __half2float(hexp(__float2half(x[0]))) + clock();\n}\n");
  const auto& family = load_spec_family(path);
  const auto& gaps = family.emulation_gaps();
  REQUIRE(gaps.size() == 5);
  CHECK_THAT(gaps[0], Catch::StartsWith("reduction.cu:3: extern __shared__"));
  CHECK_THAT(gaps[1], Catch::StartsWith("reduction.cu:4: inline PTX (asm)"));
  CHECK_THAT(gaps[2], Catch::StartsWith("reduction.cu:5: inline PTX (asm)"));
  CHECK(gaps[3] == "reduction.cu:6: __fmul_rz (the emulation does not provide it)");
  CHECK(gaps[4] == "reduction.cu:7: hexp (the emulation does not provide it)");
}

TEST_CASE("spec: sources include their headers and ktune's kt.cuh, each once", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-include");
  const auto path = reduction_copy(dir, [](std::string& t) {
    replace(t, "\"source\": \"reduction.cu\",", "\"source\": \"reduction.cu\", \"include_dirs\": [\"inc\"],");
  });
  fs::create_directories(dir / "inc");
  write(dir / "inc/partial.cuh", "#pragma once\nconstexpr int kPartialMarker = 7;\n");
  write(dir / "reduction.cu", "#include \"kt.cuh\"\n#include \"partial.cuh\"\n#include \"partial.cuh\"\n"
                              "template <int THREADS, int VEC>\n"
                              "__global__ void row_sum(const float* x, float* y, int cols) {\n"
                              "  y[blockIdx.x] = kt::warp_sum(x[threadIdx.x]);\n}\n");
  const auto& family = load_spec_family(path);
  const auto r =
      family.render(family.default_config(family.problem_classes().front()), family.problem_classes().front());
  CHECK_THAT(r.source, Catch::Contains("KT_DEVICE T warp_sum(T v)"));  // kt.cuh, expanded
  const auto first = r.source.find("kPartialMarker");
  REQUIRE(first != std::string::npos);
  CHECK(r.source.find("kPartialMarker", first + 1) == std::string::npos);
  CHECK(family.emulation_gaps().empty());  // kt.cuh's GPU half (asm, extern __shared__) is not the user's code
  write(dir / "reduction.cu", "#include \"missing.cuh\"\n");
  CHECK_THROWS_WITH(load_spec_family(path), Catch::Contains("reduction.cu:1: #include \"missing.cuh\" not found"));
  // Under #ifndef KT_EMULATION, one none of the folders holds is the GPU compiler's, as an include of <...> is.
  write(dir / "reduction.cu", "#ifndef KT_EMULATION\n#include \"cuda_fp16.h\"\n#endif\n"
                              "template <int THREADS, int VEC>\n"
                              "__global__ void row_sum(const float* x, float* y, int cols) {\n"
                              "  y[blockIdx.x] = x[threadIdx.x];\n}\n");
  const auto& gpu_only = load_spec_family(path);
  CHECK_THAT(gpu_only.render(gpu_only.default_config(gpu_only.problem_classes().front()),
                             gpu_only.problem_classes().front())
                 .source,
             Catch::Contains("#ifndef KT_EMULATION\n#include \"cuda_fp16.h\"\n#endif\n"));
  CHECK(gpu_only.emulation_gaps().empty());
  ktune::tuner::CompileCheckOptions o;
  o.arch = "sm_90";
  CHECK(ktune::tuner::compile_check({&gpu_only}, o, ktune::tuner::Compiler()).failures == 0);
}

}  // namespace spec_spec_test
