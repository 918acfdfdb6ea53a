// The SwiGLU gate families, forward and backward: spaces, constraints,
// rendering, launch plans, workloads with their CPU reference, FLOP/byte counts.
#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "base/error.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/render.hpp"
#include "templates/swiglu/swiglu.hpp"

namespace ktune::templates::swiglu {
namespace {

constexpr const char* kTemplate = "swiglu/swiglu.cuh";
constexpr std::int64_t kMaxElements = 1LL << 40;
constexpr std::int64_t kMaxAccessBytes = 16;  // the widest single load or store
// Registers a thread needs beside the input values it holds in flight
// (indices, addresses, the sigmoid's temporaries): from ptxas reports of the
// whole space, where a kernel uses about this many plus one per input value.
constexpr std::int64_t kRegistersBesideInputs = 32;

/// What both families share: problems, space, constraints, grid.
template <class ArgsT>
class SwigluBase : public TypedFamily<ArgsT> {
 public:
  SwigluBase()
      : space_({{"threads", {64, 128, 256, 512, 1024}, "threads per block: more hides latency, fewer frees registers"},
                {"vec", {1, 2, 4, 8},
                 "elements per access (16 bytes at most): wider accesses, fewer instructions; 1 is the scalar path"},
                {"unroll", {1, 2, 4, 8},
                 "vectors per thread per step: more loads in flight per thread, more registers, fewer blocks"},
                {"blocks_per_sm", {0, 1, 2, 4, 8, 16},
                 "grid cap per SM (0: no cap, one block per tile): a persistent grid-stride loop saves block "
                 "launches, a full grid keeps more blocks in flight"}}) {}

  std::vector<std::string> source_files() const override { return {kTemplate}; }
  const Space& space() const override { return space_; }

  std::vector<Problem> problem_classes() const override {
    // 4999 is a multiple of no vector width (the scalar tail runs); 6144 is
    // two rows of the small model's d_ff (whole 16-byte vectors only).
    return {Problem{"f32", {{"n", 4999}}}, Problem{"bf16", {{"n", 4999}}}, Problem{"f32", {{"n", 6144}}},
            Problem{"bf16", {{"n", 6144}}}};
  }

  void check_problem(const Problem& p) const override {
    KTUNE_REQUIRE(p.dtype == "f32" || p.dtype == "bf16",
                  this->name() + ": dtype '" + p.dtype +
                      "' is not supported; accepted: f32, bf16 (bf16 in and out, fp32 math)");
    for (const auto& [k, v] : p.dims)
      KTUNE_REQUIRE(k == "n", this->name() + ": unknown dimension '" + k + "'; accepted: n (number of elements)");
    KTUNE_REQUIRE(p.dims.count("n") && p.dim("n") >= 1 && p.dim("n") <= kMaxElements,
                  this->name() + ": dimension 'n' (number of elements) must be given, in 1..2^40");
  }

  Config default_config(const Problem& p) const override {
    // 16-byte accesses, two per operand per thread, one block per tile.
    // Not measured on a GPU yet: the tuned cache is where the best one goes.
    return Config(
        {{"threads", 256}, {"vec", kMaxAccessBytes / activation_bytes(p)}, {"unroll", 2}, {"blocks_per_sm", 0}});
  }

  bool is_valid(const Config& c, const Problem& p, const DeviceLimits& d, std::string* why) const override {
    if (c.at("threads") > d.max_threads_per_block) return reject(why, "threads exceed the device's block limit");
    if (c.at("vec") * activation_bytes(p) > kMaxAccessBytes)
      return reject(why, "vec x element size exceeds 16 bytes, the widest single access");
    const std::int64_t registers = std::min<std::int64_t>(d.max_regs_per_thread, d.regs_per_sm / c.at("threads"));
    if (inputs() * c.at("vec") * c.at("unroll") > registers - kRegistersBesideInputs)
      return reject(why, "inputs x vec x unroll values in flight per thread do not fit the registers a thread of this "
                    "block size may use (min(255, registers per SM / threads), less 32): it would spill");
    if (c.at("blocks_per_sm") * c.at("threads") > 4 * d.max_threads_per_sm)
      return reject(why,
                    "grid larger than four waves of resident threads only adds scheduling; 0 gives one block per tile");
    return true;
  }

  double bytes(const Problem& p) const override {
    return static_cast<double>((inputs() + outputs()) * activation_bytes(p)) * static_cast<double>(p.dim("n"));
  }

 protected:
  /// The launch over the problem's n elements with `addresses` (the kernel's
  /// pointers, in its parameter order) and n.
  std::vector<Launch> elementwise_plan(const Config& c, const Problem& p,
                                       std::initializer_list<std::uint64_t> addresses,
                                       const DeviceLimits& device) const {
    this->check_problem(p);
    const std::int64_t n = p.dim("n");
    const std::int64_t tiles = ceil_div(n, c.at("threads") * c.at("vec") * c.at("unroll"));
    Launch l;
    l.kernel = 0;
    l.grid = {grid_stride_blocks(tiles, c.at("blocks_per_sm"), device), 1, 1};
    l.block = {static_cast<unsigned>(c.at("threads")), 1, 1};
    for (const auto a : addresses) l.args.add(a);
    l.args.add(static_cast<long long>(n));
    return {std::move(l)};
  }
  /// Kernel name expression for `c` and `p`.
  std::string kernel(const char* function, const Config& c, const Problem& p) const {
    return fmt::format("swiglu::{}<{}, {}, {}, {}>", function, c.at("threads"), c.at("vec"), c.at("unroll"),
                       activation_type(p));
  }
  /// Buffers the kernel reads, and writes; each (n,).
  virtual std::int64_t inputs() const = 0;
  virtual std::int64_t outputs() const = 0;

 private:
  Space space_;
};

// ---- swiglu_fwd ----------------------------------------------------------------

class Forward final : public SwigluBase<ForwardArgs> {
 public:
  std::string name() const override { return "swiglu_fwd"; }
  std::string summary() const override { return "SwiGLU gate forward, h = silu(a) * b (elementwise)"; }

  ForwardArgs args_of(const Problem&, const std::vector<std::uint64_t>& a) const override {
    require_addresses(name(), a, {"a", "b", "h"});
    return {.a = a[0], .b = a[1], .h = a[2]};
  }
  std::vector<Launch> plan(const Config& c, const Problem& p, const ForwardArgs& a,
                           const DeviceLimits& device) const override {
    return elementwise_plan(c, p, {a.a, a.b, a.h}, device);
  }

  Rendered render(const Config& c, const Problem& p) const override {
    return render_template(kTemplate, {kernel("swiglu_forward", c, p)}, name());
  }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    check_problem(p);
    const DType t = activation_dtype(p);
    const std::int64_t n = p.dim("n");
    return {buffer_shape("a", Role::kInput, t, n), buffer_shape("b", Role::kInput, t, n),
            buffer_shape("h", Role::kOutput, t, n)};
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    check_problem(p);
    const auto n = static_cast<std::size_t>(p.dim("n"));
    const DType dtype = activation_dtype(p);
    std::mt19937_64 rng(seed);
    const auto a = stored_as(dtype, random_floats(rng, n, -6.f, 6.f));  // both tails of the sigmoid
    const auto b = stored_as(dtype, random_floats(rng, n, -2.f, 2.f));
    std::vector<double> h(n);
    swiglu_forward(a.data(), b.data(), h.data(), static_cast<std::int64_t>(n));
    Workload w;
    w.buffers.push_back(input_buffer("a", dtype, a));
    w.buffers.push_back(input_buffer("b", dtype, b));
    w.buffers.push_back(output_buffer("h", dtype, h));
    return w;
  }

  // sigmoid (negate, exp, add, divide) and two products; exp counted as one.
  double flops(const Problem& p) const override { return 6.0 * static_cast<double>(p.dim("n")); }

 protected:
  std::int64_t inputs() const override { return 2; }   // a, b
  std::int64_t outputs() const override { return 1; }  // h
};

// ---- swiglu_bwd ----------------------------------------------------------------

class Backward final : public SwigluBase<BackwardArgs> {
 public:
  std::string name() const override { return "swiglu_bwd"; }
  std::string summary() const override {
    return "SwiGLU gate backward, da = dh * b * silu'(a) and db = dh * silu(a) (elementwise)";
  }

  BackwardArgs args_of(const Problem&, const std::vector<std::uint64_t>& a) const override {
    require_addresses(name(), a, {"a", "b", "dh", "da", "db"});
    return {.a = a[0], .b = a[1], .dh = a[2], .da = a[3], .db = a[4]};
  }
  std::vector<Launch> plan(const Config& c, const Problem& p, const BackwardArgs& a,
                           const DeviceLimits& device) const override {
    return elementwise_plan(c, p, {a.a, a.b, a.dh, a.da, a.db}, device);
  }

  Rendered render(const Config& c, const Problem& p) const override {
    return render_template(kTemplate, {kernel("swiglu_backward", c, p)}, name());
  }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    check_problem(p);
    const DType t = activation_dtype(p);
    const std::int64_t n = p.dim("n");
    return {buffer_shape("a", Role::kInput, t, n), buffer_shape("b", Role::kInput, t, n),
            buffer_shape("dh", Role::kInput, t, n), buffer_shape("da", Role::kOutput, t, n),
            buffer_shape("db", Role::kOutput, t, n)};
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    check_problem(p);
    const auto n = static_cast<std::size_t>(p.dim("n"));
    const DType dtype = activation_dtype(p);
    std::mt19937_64 rng(seed);
    const auto a = stored_as(dtype, random_floats(rng, n, -6.f, 6.f));
    const auto b = stored_as(dtype, random_floats(rng, n, -2.f, 2.f));
    const auto dh = stored_as(dtype, random_floats(rng, n, -1.f, 1.f));
    std::vector<double> da(n), db(n);
    swiglu_backward(a.data(), b.data(), dh.data(), da.data(), db.data(), static_cast<std::int64_t>(n));
    Workload w;
    w.buffers.push_back(input_buffer("a", dtype, a));
    w.buffers.push_back(input_buffer("b", dtype, b));
    w.buffers.push_back(input_buffer("dh", dtype, dh));
    w.buffers.push_back(output_buffer("da", dtype, da));
    w.buffers.push_back(output_buffer("db", dtype, db));
    return w;
  }

  // sigmoid (4), silu and db (2), da (6); exp counted as one.
  double flops(const Problem& p) const override { return 12.0 * static_cast<double>(p.dim("n")); }

 protected:
  std::int64_t inputs() const override { return 3; }   // a, b, dh
  std::int64_t outputs() const override { return 2; }  // da, db
};

}  // namespace

const ForwardFamily& forward_family() {
  static const Forward f;
  return f;
}
const BackwardFamily& backward_family() {
  static const Backward f;
  return f;
}

}  // namespace ktune::templates::swiglu
