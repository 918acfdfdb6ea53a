// Every registered family: spaces, defaults, constraints, rendering.
#include "templates/family.hpp"

#include <catch2/catch.hpp>
#include <cctype>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "base/error.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/embedded.hpp"
#include "templates/render.hpp"

namespace templates_family_test {

using namespace ktune;
using namespace ktune::templates;

TEST_CASE("every family's default config is a valid point of its space for each problem class", "[family]") {
  for (const Family* f : all_families()) {
    INFO(f->name());
    REQUIRE(f->space().size() > 0);
    REQUIRE_FALSE(f->problem_classes().empty());
    for (const auto& p : f->problem_classes()) {
      INFO(p.key());
      CHECK_NOTHROW(f->check_problem(p));
      const Config c = f->default_config(p);
      CHECK_NOTHROW(f->space().check_member(c));
      for (const auto& arch : {"sm_80", "sm_90"}) {
        std::string why;
        CHECK(f->is_valid(c, p, DeviceLimits::for_arch(arch), &why));
        CHECK(why.empty());
      }
    }
  }
}

TEST_CASE("every family's buffer shapes are its workload's buffers, without making them", "[family]") {
  // What a program allocates from (the run-time API's Kernel::buffers) must be what a launch takes: the
  // workload's names, roles, dtypes and sizes, in order. A ragged size beside each class's.
  for (const Family* f : all_families()) {
    INFO(f->name());
    for (auto p : f->problem_classes()) {
      for (int pass = 0; pass < 2; ++pass) {
        INFO(p.key());
        const auto shapes = f->buffer_shapes(p);
        const auto made = shapes_of(f->make_workload(p, 1));  // from the workload itself
        REQUIRE(shapes.size() == made.size());
        for (std::size_t i = 0; i < shapes.size(); ++i) {
          INFO(made[i].name);
          CHECK(shapes[i] == made[i]);
        }
        for (auto& [dim, value] : p.dims)  // odd sizes that still pass the family's checks
          if (value > 7 && dim != "head_dim" && dim != "vocab" && dim != "causal") value += 3;
        try {
          f->check(p);
        } catch (const Error&) {
          break;
        }
      }
    }
  }
}

TEST_CASE("every buffer a family writes in place of another is written, of the input's dtype and size", "[family]") {
  int pairs = 0;
  for (const Family* f : all_families()) {
    INFO(f->name());
    for (const auto& p : f->problem_classes()) {
      INFO(p.key());
      const auto shapes = f->buffer_shapes(p);
      const auto named = [&](const std::string& name) {
        const auto it = std::find_if(shapes.begin(), shapes.end(), [&](const auto& s) { return s.name == name; });
        REQUIRE(it != shapes.end());
        return *it;
      };
      for (const auto& [output, input] : f->in_place(p)) {
        INFO(output << " over " << input);
        const BufferShape out = named(output), in = named(input);
        CHECK(out.role != Role::kInput);
        CHECK(in.role == Role::kInput);
        CHECK(out.dtype == in.dtype);
        CHECK(out.bytes == in.bytes);
        ++pairs;
      }
    }
  }
  CHECK(pairs > 20);  // the softmax, rope, residual RMSNorm, cross-entropy and elementwise primitives
}

TEST_CASE("every run-time scalar of a family reaches its kernels' arguments, at the workload's values by default",
          "[family]") {
  // What a program passes at launch (the run-time API's parameters): each scalar must change the bytes the kernels
  // get, the workload's values (scalars()) must be what a launch without them takes, and no other name is taken.
  const auto arg_bytes = [](const std::vector<Launch>& launches) {
    std::vector<std::byte> all;
    for (const auto& l : launches) all.insert(all.end(), l.args.bytes().begin(), l.args.bytes().end());
    return all;
  };
  const DeviceLimits device = DeviceLimits::for_arch("sm_90");
  std::set<std::string> with_scalars;
  for (const Family* f : all_families())
    for (const auto& p : f->problem_classes()) {
      INFO(f->name() << " " << p.key());
      std::vector<std::uint64_t> addresses;
      for (std::size_t i = 0; i < f->buffer_shapes(p).size(); ++i) addresses.push_back(0x100000 * (i + 1));
      const Config c = f->default_config(p);
      const auto base = arg_bytes(f->plan(c, p, addresses, device));
      const Scalars scalars = f->scalars(p);
      CHECK(arg_bytes(f->plan(c, p, addresses, device, scalars)) == base);
      for (const auto& [key, value] : scalars) {
        INFO(key << " = " << value);
        with_scalars.insert(f->name());
        const double other = value == 0 ? 0.5 : key == "step" ? value + 1 : key.starts_with("beta") ? value / 2
                                                                                                    : value * 2;
        CHECK(arg_bytes(f->plan(c, p, addresses, device, {{key, other}})) != base);
      }
      CHECK_THROWS_WITH(f->plan(c, p, addresses, device, {{"no_such_scalar", 1.0}}),
                        Catch::Contains("no_such_scalar"));
    }
  // The families a program sets scalars of: AdamW's hyper-parameters, the scales, a clip norm, alpha.
  for (const char* name : {"adamw", "adamw_single", "adamw_eager", "softmax_fwd", "softmax_bwd", "attention_fwd",
                           "attention_bwd", "cross_entropy_bwd", "grad_norm", "prim_scale", "prim_fill"})
    CHECK(with_scalars.count(name) == 1);
}

TEST_CASE("every run-time scalar of a family moves its reference, and a value no launch takes is refused first",
          "[family]") {
  // `run --parameters` and `tune --parameters` check a built-in family at the values given: the workload's expected
  // outputs must be the reference's at those values, not at the family's own (a check that would pass a kernel
  // ignoring them).
  const auto expected = [](const Workload& w) {
    std::vector<std::vector<std::byte>> out;
    for (const auto& b : w.buffers) out.push_back(b.expected);
    return out;
  };
  for (const Family* f : all_families())
    for (const auto& p : f->problem_classes()) {
      const Scalars own = f->scalars(p);
      if (own.empty()) continue;
      INFO(f->name() << " " << p.key());
      const Workload base = f->make_workload(p, 7);
      const bool same = expected(f->make_workload(p, 7, own)) == expected(base);
      CHECK(same);
      for (const auto& [key, value] : own) {
        INFO(key << " = " << value);
        const double other = value == 0 ? 0.5 : key == "step" ? value + 3 : key.starts_with("beta") ? value / 2
                                                                                                    : value * 2;
        CHECK_NOTHROW(f->require_checkable(p, {{key, other}}));
        const Workload moved = f->make_workload(p, 7, {{key, other}});
        const bool moves = expected(moved) != expected(base);
        CHECK(moves);
      }
      CHECK_THROWS_WITH(f->require_checkable(p, {{"no_such_scalar", 1.0}}), Catch::Contains("no_such_scalar"));
    }
  // Values a launch refuses are refused before a workload is made.
  const Problem adam{"f32", {{"tensors", 2}, {"numel", 100}}};
  CHECK_THROWS_WITH(find_family("adamw").require_checkable(adam, {{"beta1", 1.0}}),
                    Catch::Contains("adamw: beta1 must be in [0, 1), got 1"));
  CHECK_THROWS_WITH(find_family("adamw_eager").make_workload(adam, 1, {{"step", 0.5}}),
                    Catch::Contains("step must be a whole number from 1"));
  const Family& attention = find_family("attention_fwd");
  CHECK_THROWS_WITH(attention.require_checkable(attention.problem_classes().front(), {{"scale", -0.125}}),
                    Catch::Contains("attention_fwd: the softmax scale must be positive, got -0.125"));
}

TEST_CASE("rendering is deterministic and names its kernels", "[family]") {
  for (const Family* f : all_families()) {
    for (const auto& p : f->problem_classes()) {
      const Config c = f->default_config(p);
      const Rendered a = f->render(c, p);
      const Rendered b = f->render(c, p);
      CHECK(a.source == b.source);
      CHECK(a.kernels == b.kernels);
      REQUIRE_FALSE(a.kernels.empty());
      CHECK(a.source.find("#include \"") == std::string::npos);  // self-contained
      CHECK(a.source.find("kt_instantiate") != std::string::npos);
    }
  }
}

TEST_CASE("every kernel a family launches waits for the previous kernel before anything else", "[family]") {
  // Programmatic dependent launch starts a kernel while the previous one
  // finishes: a kernel that read or wrote memory before
  // kt::wait_previous_kernel() would race with it.
  std::set<std::string> checked;
  for (const auto& [path, text] : embedded_files()) {
    if (!path.ends_with(".cuh")) continue;
    const std::string t(text);
    for (std::size_t at = t.find("\n__global__"); at != std::string::npos; at = t.find("\n__global__", at + 1)) {
      const std::size_t body = t.find('{', at);
      REQUIRE(body != std::string::npos);
      std::string head = t.substr(at, body - at);
      if (const auto lb = head.find("__launch_bounds__("); lb != std::string::npos)
        head.erase(lb, head.find(')', lb) + 1 - lb);
      const std::size_t paren = head.find('(');
      REQUIRE(paren != std::string::npos);
      std::size_t start = paren;
      while (start > 0 && (std::isalnum(static_cast<unsigned char>(head[start - 1])) || head[start - 1] == '_'))
        --start;
      const std::string name = head.substr(start, paren - start);
      INFO(path << ": kernel " << name);
      std::size_t first = t.find_first_not_of(" ", body + 1);
      if (t.compare(first, 2, "//") == 0) first = t.find('\n', first);  // a comment after the brace
      first = t.find_first_not_of(" \n", first);
      const std::string wait = "kt::wait_previous_kernel();";
      CHECK(t.compare(first, wait.size(), wait) == 0);
      checked.insert(name);
    }
  }
  for (const Family* f : all_families())
    for (const auto& p : f->problem_classes()) {
      const Rendered r = f->render(f->default_config(p), p);
      CHECK(r.waits_previous_kernel);
      for (const auto& k : r.kernels) {
        const std::string name = k.substr(0, k.find('<')).substr(k.substr(0, k.find('<')).rfind(':') + 1);
        INFO(f->name() << " launches " << k);
        CHECK(checked.count(name) == 1);
      }
    }
  // Text from elsewhere (a kernel spec's files) is not known to wait.
  CHECK_FALSE(render_text("__global__ void k() {}", {"k"}, "user", "a spec").waits_previous_kernel);
}

TEST_CASE("compile-time parameters change the source while run-time ones and shapes share it", "[family]") {
  const Family& f = find_family("adamw");
  const Problem p = f.problem_classes().front();
  Config a = f.default_config(p), b = a, c = a;
  b.set("threads", a.at("threads") == 256 ? 512 : 256);
  CHECK(f.render(a, p).source != f.render(b, p).source);
  c.set("chunk", a.at("chunk") == 8192 ? 32768 : 8192);  // a kernel argument, not a template parameter
  c.set("blocks_per_sm", a.at("blocks_per_sm") == 1 ? 2 : 1);
  CHECK(f.render(a, p).source == f.render(c, p).source);
  Problem bigger = p;
  bigger.dims["numel"] *= 7;
  CHECK(f.render(a, p).source == f.render(a, bigger).source);  // one binary serves every shape
}

TEST_CASE("family source hashes are stable and distinct", "[family]") {
  for (const Family* f : all_families()) {
    CHECK(f->source_hash() == f->source_hash());
    CHECK(f->source_hash().size() == 32);
  }
  CHECK(find_family("adamw").source_hash() != find_family("adamw_single").source_hash());
}

TEST_CASE("unknown families and bad problems are rejected with what is accepted", "[family]") {
  CHECK_THROWS_WITH(find_family("nope"), Catch::Contains("known families: adamw"));
  const Family& f = find_family("adamw");
  CHECK_THROWS_WITH(f.check_problem(Problem{"f64", {{"tensors", 1}, {"numel", 4}}}), Catch::Contains("accepted: f32"));
  CHECK_THROWS_WITH(f.check_problem(Problem{"f32", {{"tensors", 0}, {"numel", 4}}}), Catch::Contains("1..4096"));
  CHECK_THROWS_WITH(f.check_problem(Problem{"f32", {{"tensors", 1}, {"rows", 4}}}),
                    Catch::Contains("unknown dimension 'rows'"));
}

TEST_CASE("problem keys are stable and round-trip through JSON", "[family]") {
  const Problem p{"bf16", {{"tensors", 4}, {"numel", 16384}}};
  CHECK(p.key() == "bf16;numel=16384;tensors=4");
  CHECK(Problem::from_json(p.to_json()) == p);
  CHECK_THROWS_AS(Problem::from_json(nlohmann::json::parse(R"({"dims":{}})")), Error);
}

TEST_CASE("bf16 conversion rounds to nearest even", "[family]") {
  CHECK(bf16_bits_to_float(float_to_bf16_bits(1.0f)) == 1.0f);
  // 1 + 2^-8 lies halfway between two bf16 values: ties go to the even one (1.0).
  CHECK(bf16_bits_to_float(float_to_bf16_bits(1.0f + 1.0f / 256)) == 1.0f);
  CHECK(bf16_bits_to_float(float_to_bf16_bits(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);
  CHECK(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::nanf("")))));
}

TEST_CASE("fp16 bits convert exactly, subnormals and specials included", "[family]") {
  CHECK(f16_bits_to_float(0x3c00) == 1.0f);
  CHECK(f16_bits_to_float(0xc000) == -2.0f);
  CHECK(f16_bits_to_float(0x7bff) == 65504.0f);
  CHECK(f16_bits_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(std::isinf(f16_bits_to_float(0x7c00)));
  CHECK(std::isnan(f16_bits_to_float(0x7e00)));
}

TEST_CASE("relative L2 error flags NaN and measures differences", "[family]") {
  auto bytes = [](std::vector<float> v) { return make_buffer("x", Role::kOutput, DType::kF32, v).bytes; };
  CHECK(relative_l2(DType::kF32, bytes({1, 2, 3}), bytes({1, 2, 3})) == 0.0);
  CHECK(relative_l2(DType::kF32, bytes({1, 2, 3.3f}), bytes({1, 2, 3})) == Approx(0.3 / std::sqrt(14.0)).epsilon(1e-5));
  CHECK(std::isinf(relative_l2(DType::kF32, bytes({1, std::nanf(""), 3}), bytes({1, 2, 3}))));
  // What a failed check says besides: the elements never written (the poison outputs start as, all ones), else
  // the one furthest off.
  float poison;
  std::memset(&poison, 0xff, sizeof poison);
  CHECK(mismatch_detail(DType::kF32, bytes({1, poison, 3, poison}), bytes({1, 2, 3, 4})) ==
        "2 of 4 elements not finite (never written, or computed from memory read before it was written?), the first "
        "at index 1");
  // Not finite but written: an infinity is an overflow; another NaN was computed, from an overflow or not.
  const float inf = INFINITY, nan = std::nanf("");
  CHECK(mismatch_detail(DType::kF32, bytes({1, 2, -inf, inf}), bytes({1, 2, 3e-6f, 4})) ==
        "2 of 4 elements infinite where the reference's are finite (overflow?), the first at index 2");
  CHECK(mismatch_detail(DType::kF32, bytes({nan, 2, inf, poison}), bytes({1, 2, 3, 4})) ==
        "1 of 4 elements not finite (never written, or computed from memory read before it was written?), the first "
        "at index 3; 1 of 4 elements infinite where the reference's are finite (overflow?), the first at index 2; 1 "
        "of 4 elements a computed NaN where the reference's are finite (from an overflow, inf - inf or 0 * inf, or "
        "from memory read before it was written?), the first at index 0");
  // 16-bit outputs' poison is all ones too.
  const std::vector<std::byte> f16_expected = make_buffer("x", Role::kOutput, DType::kF16,
                                                          std::vector<std::uint16_t>{0x3c00, 0x3c00}).bytes;
  CHECK_THAT(mismatch_detail(DType::kF16, make_buffer("x", Role::kOutput, DType::kF16,
                                                      std::vector<std::uint16_t>{0xffff, 0x7c00}).bytes,
                             f16_expected),
             Catch::StartsWith("1 of 2 elements not finite (never written") &&
                 Catch::Contains("1 of 2 elements infinite where the reference's are finite (overflow?)"));
  CHECK(mismatch_detail(DType::kF32, bytes({1, 2.5f, 3, 4.25f}), bytes({1, 2, 3, 4})) ==
        "furthest off at index 1: 2.5, expected 2");
  CHECK(mismatch_detail(DType::kF32, bytes({1, 2}), bytes({1, 2})).empty());
  // Integers: the one furthest off, or, every one 1 below, the poison an output starts as that a kernel added to.
  const auto ints = [](std::vector<std::int32_t> v) {
    std::vector<std::byte> b(v.size() * sizeof(std::int32_t));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  CHECK(mismatch_detail(DType::kI32, ints({3, 9, 4}), ints({3, 2, 4})) == "furthest off at index 1: 9, expected 2");
  CHECK_THAT(mismatch_detail(DType::kI32, ints({-1, 2, 0}), ints({0, 3, 1})),
             Catch::StartsWith("every element is 1 below the reference's: an output starts as all ones"));
  // u8 wraps (255 is 0's all-ones start), i64 is exact past 2^53.
  const std::vector<std::byte> u8_got{std::byte{255}, std::byte{4}}, u8_expected{std::byte{0}, std::byte{5}};
  CHECK_THAT(mismatch_detail(DType::kU8, u8_got, u8_expected), Catch::StartsWith("every element is 1 below"));
  const auto i64 = [](std::vector<std::int64_t> v) {
    std::vector<std::byte> b(v.size() * sizeof(std::int64_t));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  const std::int64_t big = (std::int64_t{1} << 60) + 1;
  CHECK(mismatch_detail(DType::kI64, i64({big, 7}), i64({big - 1, 7})) ==
        "furthest off at index 0: " + std::to_string(big) + ", expected " + std::to_string(big - 1));
}

TEST_CASE("a check fails one element wrong among right ones, which the relative L2 error spreads thin, and "
          "integers that are not exact",
          "[family]") {
  // A bf16 tail written as x where the answer is x + y: one element in 100003, relative L2 error ~0.004, within
  // bf16's 1e-2.
  std::mt19937_64 rng(5);
  const std::size_t n = 100003;
  const auto x = random_floats(rng, n, -1.f, 1.f), y = random_floats(rng, n, -1.f, 1.f);
  std::vector<double> sum(n), wrong(n);
  for (std::size_t i = 0; i < n; ++i) sum[i] = wrong[i] = static_cast<double>(x[i]) + y[i];
  wrong[n - 2] = x[n - 2];
  HostBuffer z = output_buffer("z", DType::kBF16, sum);
  z.tolerance = tolerance_for("bf16");
  const auto got = input_buffer("z", DType::kBF16, wrong).bytes;
  const double e = relative_l2(DType::kBF16, got, z.expected);
  REQUIRE(e < z.tolerance);
  CHECK_FALSE(within_tolerance(z, got, e));
  CHECK_THAT(mismatch(z, got, e), Catch::StartsWith("z element 100001 is ") &&
                                      Catch::Contains("off by more than 16 tolerances") &&
                                      Catch::Contains("though the relative L2 error"));
  // Rounded as bf16 every element, the answer passes; so does one with an element 10 tolerances off.
  const auto rounded = input_buffer("z", DType::kBF16, sum).bytes;
  CHECK(within_tolerance(z, rounded, relative_l2(DType::kBF16, rounded, z.expected)));
  std::vector<double> near = sum;
  near[7] += 10 * z.tolerance * std::max(std::abs(sum[7]), 0.8);
  const auto near_bytes = input_buffer("z", DType::kBF16, near).bytes;
  CHECK(within_tolerance(z, near_bytes, relative_l2(DType::kBF16, near_bytes, z.expected)));

  // A count one short in 200000 is wrong, whatever its relative error; an exact one passes.
  std::vector<std::int32_t> counts(1000, 200000), short_by_one = counts;
  short_by_one[999] = 199999;
  HostBuffer c = make_buffer("c", Role::kOutput, DType::kI32, std::vector<std::int32_t>(1000));
  set_expected(c, counts);
  const auto off = make_buffer("c", Role::kOutput, DType::kI32, short_by_one).bytes;
  const double ce = relative_l2(DType::kI32, off, c.expected);
  REQUIRE(ce < c.tolerance);
  CHECK_FALSE(within_tolerance(c, off, ce));
  CHECK(mismatch(c, off, ce) ==
        "c: 1 of 1000 integers differ from the reference's (integers are compared exactly, or within an atol "
        "given) (furthest off at index "
        "999: 199999, expected 200000)");
  const auto right = make_buffer("c", Role::kOutput, DType::kI32, counts).bytes;
  CHECK(within_tolerance(c, right, 0.0));
  // Within an atol given, as a quantising kernel's rounding may be.
  c.atol = 1;
  CHECK(within_tolerance(c, off, ce));
  short_by_one[3] = 199998;
  const auto two_off = make_buffer("c", Role::kOutput, DType::kI32, short_by_one).bytes;
  CHECK_FALSE(within_tolerance(c, two_off, relative_l2(DType::kI32, two_off, c.expected)));
  CHECK_THAT(mismatch(c, two_off, 0.0), Catch::StartsWith("c: 1 of 1000 integers differ from the reference's (by "
                                                          "more than the atol 1)"));
}

TEST_CASE("a reference checked on a sample of rows (zeros elsewhere) scales the element check by the rows it "
          "checks",
          "[family]") {
  // 1000 checked answers in a million (attention's sampled rows at large shapes): an error of 0.008 on an answer
  // near zero is 1.4 % of the checked answers' RMS, within 16 bf16 tolerances of it, though not of the whole
  // buffer's RMS, which the zeros shrink 30-fold.
  std::mt19937_64 rng(9);
  const auto checked = random_floats(rng, 1000, -1.f, 1.f);
  std::vector<double> expected(1000000, 0.0), got;
  for (std::size_t i = 0; i < checked.size(); ++i) expected[i] = checked[i];
  expected[5] = 0.001;
  got = expected;
  got[5] += 0.008;
  HostBuffer dq = output_buffer("dq", DType::kF32, expected);
  dq.tolerance = tolerance_for("bf16");
  const auto bytes = input_buffer("dq", DType::kF32, got).bytes;
  CHECK(within_tolerance(dq, bytes, relative_l2(DType::kF32, bytes, dq.expected)));
  got[5] = expected[5] + 0.15;  // a wrong one still fails, by the element check alone
  const auto wrong = input_buffer("dq", DType::kF32, got).bytes;
  CHECK_FALSE(within_tolerance(dq, wrong, relative_l2(DType::kF32, wrong, dq.expected)));
}

}  // namespace templates_family_test
