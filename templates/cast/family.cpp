// The dtype cast families, fp32 -> bf16 and bf16 -> fp32: space, constraints,
// rendering, launch plans, workloads with their CPU reference, FLOP/byte counts.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>

#include "base/error.hpp"
#include "templates/cast/cast.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/render.hpp"

namespace ktune::templates::cast {
namespace {

constexpr const char* kTemplate = "cast/cast.cuh";
constexpr std::int64_t kMaxElements = 1LL << 40;
// Registers a thread needs beside the source values it holds in flight
// (indices, addresses): as for the other grid-stride elementwise kernels.
constexpr std::int64_t kRegistersBesideValues = 32;

/// What both directions share: problems, space, constraints, grid.
class CastBase : public CastFamily {
 public:
  CastBase()
      : space_({{"threads", {64, 128, 256, 512, 1024}, "threads per block: more hides latency, fewer frees registers"},
                {"vec", {1, 2, 4, 8},
                 "elements per access: wider accesses, fewer instructions (8 moves 16 bytes of bf16, two 16-byte "
                 "accesses of fp32); 1 is the scalar path"},
                {"unroll", {1, 2, 4, 8},
                 "vectors per thread per step: more loads in flight per thread, more registers, fewer blocks"},
                {"blocks_per_sm", {0, 1, 2, 4, 8, 16},
                 "grid cap per SM (0: no cap, one block per tile): a persistent grid-stride loop saves block "
                 "launches, a full grid keeps more blocks in flight"}}) {}

  std::vector<std::string> source_files() const override { return {kTemplate}; }
  const Space& space() const override { return space_; }

  std::vector<Problem> problem_classes() const override {
    // 4999 is a multiple of no vector width (the scalar tail runs); 6144 is
    // whole vectors of every width.
    return {Problem{"bf16", {{"n", 4999}}}, Problem{"bf16", {{"n", 6144}}}};
  }

  void check_problem(const Problem& p) const override {
    KTUNE_REQUIRE(p.dtype == "bf16", name() + ": dtype '" + p.dtype +
                                         "' is not supported; accepted: bf16 (the narrow side of the cast; the other "
                                         "side is f32)");
    for (const auto& [k, v] : p.dims)
      KTUNE_REQUIRE(k == "n", name() + ": unknown dimension '" + k + "'; accepted: n (number of elements)");
    KTUNE_REQUIRE(p.dims.count("n") && p.dim("n") >= 1 && p.dim("n") <= kMaxElements,
                  name() + ": dimension 'n' (number of elements) must be given, in 1..2^40");
  }

  Config default_config(const Problem&) const override {
    // 16-byte bf16 accesses (two of fp32), two per thread, one block per tile.
    // Not measured on a GPU yet: the tuned cache is where the best one goes.
    return Config({{"threads", 256}, {"vec", 8}, {"unroll", 2}, {"blocks_per_sm", 0}});
  }

  bool is_valid(const Config& c, const Problem&, const DeviceLimits& d, std::string* why) const override {
    if (c.at("threads") > d.max_threads_per_block) return reject(why, "threads exceed the device's block limit");
    const std::int64_t registers = std::min<std::int64_t>(d.max_regs_per_thread, d.regs_per_sm / c.at("threads"));
    // A register per value in flight: bf16 values pack two to a register as
    // loaded, but each becomes an fp32 register on its way through (ptxas:
    // bf16 -> fp32 with 1024 threads x 8 x 8 values spills).
    const std::int64_t held = c.at("vec") * c.at("unroll");
    if (held > registers - kRegistersBesideValues)
      return reject(why, fmt::format("vec x unroll values in flight per thread take {} registers, more than "
                                     "the {} a thread of this block size may use (min(255, registers per SM / "
                                     "threads), less 32): it would spill",
                                     held, registers - kRegistersBesideValues));
    if (c.at("blocks_per_sm") * c.at("threads") > 4 * d.max_threads_per_sm)
      return reject(why,
                    "grid larger than four waves of resident threads only adds scheduling; 0 gives one block per tile");
    return true;
  }

  Rendered render(const Config& c, const Problem& p) const override {
    check_problem(p);
    return render_template(kTemplate,
                           {fmt::format("cast::convert<{}, {}, {}, {}, {}>", c.at("threads"), c.at("vec"),
                                        c.at("unroll"), source_type(), destination_type())},
                           name());
  }

  Args args_of(const Problem&, const std::vector<std::uint64_t>& a) const override {
    require_addresses(name(), a, {"x", "y"});
    return {.x = a[0], .y = a[1]};
  }

  std::vector<Launch> plan(const Config& c, const Problem& p, const Args& a,
                           const DeviceLimits& device) const override {
    check_problem(p);
    const std::int64_t n = p.dim("n");
    const std::uint64_t x_end = a.x + static_cast<std::uint64_t>(n * source_bytes());
    const std::uint64_t y_end = a.y + static_cast<std::uint64_t>(n * (6 - source_bytes()));
    KTUNE_REQUIRE(x_end <= a.y || y_end <= a.x,
                  fmt::format("{}: x at {:#x} and y at {:#x} overlap; a cast changes the element size, so it cannot "
                              "run in place",
                              name(), a.x, a.y));
    const std::int64_t tiles = ceil_div(n, c.at("threads") * c.at("vec") * c.at("unroll"));
    Launch l;
    l.grid = {grid_stride_blocks(tiles, c.at("blocks_per_sm"), device), 1, 1};
    l.block = {static_cast<unsigned>(c.at("threads")), 1, 1};
    l.args.add(a.x).add(a.y).add(static_cast<long long>(n));
    std::vector<Launch> launches;
    launches.push_back(std::move(l));
    return launches;
  }

  double flops(const Problem&) const override { return 0.0; }  // a conversion, no arithmetic
  double bytes(const Problem& p) const override {               // read 4 + write 2, or read 2 + write 4
    return 6.0 * static_cast<double>(p.dim("n"));
  }

 protected:
  /// Bytes of a source element: 4 (fp32) or 2 (bf16).
  virtual std::int64_t source_bytes() const = 0;
  const char* source_type() const { return source_bytes() == 4 ? "float" : "kt::bf16"; }
  const char* destination_type() const { return source_bytes() == 4 ? "kt::bf16" : "float"; }

 private:
  Space space_;
};

/// fp32 values over many binades (-2^20..2^20 and down to 2^-20), one in
/// eight exactly halfway between two bf16 values, so that the tie rule shows.
std::vector<float> cast_inputs(std::mt19937_64& rng, std::size_t n) {
  auto values = random_floats(rng, n, -1.f, 1.f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  for (std::size_t i = 0; i < n; ++i) {
    values[i] = std::ldexp(values[i], exponent(rng));
    if (i % 8 == 3) values[i] = std::bit_cast<float>((std::bit_cast<std::uint32_t>(values[i]) & ~0xffffu) | 0x8000u);
  }
  return values;
}

/// An output buffer of `values` checked exactly: a cast has one right answer.
template <class T>
HostBuffer exact_output(std::string name, DType dtype, const std::vector<T>& values) {
  HostBuffer b = make_buffer(std::move(name), Role::kOutput, dtype, std::vector<T>(values.size()));
  set_expected(b, values);
  b.tolerance = 0.0;
  return b;
}

// ---- cast_to_bf16 --------------------------------------------------------------

class ToBf16 final : public CastBase {
 public:
  std::string name() const override { return "cast_to_bf16"; }
  std::string summary() const override { return "fp32 -> bf16 copy, round to nearest even (elementwise)"; }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    check_problem(p);
    return {buffer_shape("x", Role::kInput, DType::kF32, p.dim("n")),
            buffer_shape("y", Role::kOutput, DType::kBF16, p.dim("n"))};
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    check_problem(p);
    const auto n = static_cast<std::size_t>(p.dim("n"));
    std::mt19937_64 rng(seed);
    const auto x = cast_inputs(rng, n);
    std::vector<std::uint16_t> y(n);
    cast_to_bf16(x.data(), y.data(), static_cast<std::int64_t>(n));
    Workload w;
    w.buffers.push_back(make_buffer("x", Role::kInput, DType::kF32, x));
    w.buffers.push_back(exact_output("y", DType::kBF16, y));
    return w;
  }

 protected:
  std::int64_t source_bytes() const override { return 4; }
};

// ---- cast_to_f32 ---------------------------------------------------------------

class ToF32 final : public CastBase {
 public:
  std::string name() const override { return "cast_to_f32"; }
  std::string summary() const override { return "bf16 -> fp32 copy, exact (elementwise)"; }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    check_problem(p);
    return {buffer_shape("x", Role::kInput, DType::kBF16, p.dim("n")),
            buffer_shape("y", Role::kOutput, DType::kF32, p.dim("n"))};
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    check_problem(p);
    const auto n = static_cast<std::size_t>(p.dim("n"));
    std::mt19937_64 rng(seed);
    const auto f = cast_inputs(rng, n);
    std::vector<std::uint16_t> x(n);
    cast_to_bf16(f.data(), x.data(), static_cast<std::int64_t>(n));
    std::vector<float> y(n);
    cast_to_f32(x.data(), y.data(), static_cast<std::int64_t>(n));
    Workload w;
    w.buffers.push_back(make_buffer("x", Role::kInput, DType::kBF16, x));
    w.buffers.push_back(exact_output("y", DType::kF32, y));
    return w;
  }

 protected:
  std::int64_t source_bytes() const override { return 2; }
};

}  // namespace

const CastFamily& to_bf16_family() {
  static const ToBf16 f;
  return f;
}
const CastFamily& to_f32_family() {
  static const ToF32 f;
  return f;
}

}  // namespace ktune::templates::cast
