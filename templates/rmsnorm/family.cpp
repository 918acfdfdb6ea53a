// The two RMSNorm families: spaces, constraints, rendering, launch plans,
// workloads with their CPU reference, FLOP/byte counts.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "base/error.hpp"
#include "templates/render.hpp"
#include "templates/rmsnorm/rmsnorm.hpp"

namespace ktune::templates::rmsnorm {
namespace {

constexpr const char* kTemplate = "rmsnorm/rmsnorm.cuh";
constexpr std::int64_t kMinRowThreads = 8;  // the smallest `row_threads`
constexpr std::int64_t kMinBlocks = 64;     // the smallest `blocks` of rmsnorm_bwd
constexpr std::int64_t kDefaultElementsPerThread = 16;  // defaults stay well clear of spilling
constexpr unsigned kReduceColumns = 32;     // columns per block of rmsnorm_dw_reduce (one per lane)
constexpr std::int64_t kBaseRegisters = 24;  // rmsnorm_bwd's registers besides the row share

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

bool is_bf16(const Problem& p) { return p.dtype == "bf16"; }
std::int64_t activation_bytes(const Problem& p) { return is_bf16(p) ? 2 : 4; }
const char* activation_type(const Problem& p) { return is_bf16(p) ? "__nv_bfloat16" : "float"; }

/// Vectors of its row each thread holds: the template's ITEMS.
std::int64_t items(const Config& c, const Problem& p) {
  return ceil_div(p.dim("dim"), c.at("row_threads") * c.at("vec"));
}
/// Rows of one block.
std::int64_t rows_per_block(const Config& c) { return c.at("threads") / c.at("row_threads"); }

bool reject(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return false;
}

void require_aligned(const std::string& family, const char* buffer, std::uint64_t address, std::int64_t align) {
  KTUNE_REQUIRE(address % static_cast<std::uint64_t>(align) == 0,
                fmt::format("{}: buffer '{}' at {:#x} is not aligned to the {} bytes of the config's vector accesses",
                            family, buffer, address, align));
}

/// `values` stored as `dtype` ("f32" or "bf16") in an input buffer; `exact`
/// receives the stored values, for the float64 reference.
HostBuffer input_buffer(std::string name, const std::string& dtype, const std::vector<float>& values,
                        std::vector<double>& exact) {
  exact.resize(values.size());
  if (dtype == "bf16") {
    std::vector<std::uint16_t> bits(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      bits[i] = float_to_bf16_bits(values[i]);
      exact[i] = bf16_bits_to_float(bits[i]);
    }
    return make_buffer(std::move(name), Role::kInput, DType::kBF16, bits);
  }
  std::copy(values.begin(), values.end(), exact.begin());
  return make_buffer(std::move(name), Role::kInput, DType::kF32, values);
}

/// `rows` rows of `dim` activations: uniform in [-2, 2) times a per-row scale
/// drawn log-uniformly from [1e-3, 1], so that eps shows in the small rows
/// (mean(x^2) down to ~1e-6, against eps 1e-5).
std::vector<float> activation_rows(std::mt19937_64& rng, std::int64_t rows, std::int64_t dim) {
  auto values = random_floats(rng, static_cast<std::size_t>(rows * dim), -2.f, 2.f);
  const auto log_scales = random_floats(rng, static_cast<std::size_t>(rows), -3.f, 0.f);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float scale = std::pow(10.f, log_scales[static_cast<std::size_t>(r)]);
    for (std::int64_t c = 0; c < dim; ++c) values[static_cast<std::size_t>(r * dim + c)] *= scale;
  }
  return values;
}

/// An output buffer of `n` elements of `dtype` expecting `values` (rounded to
/// the dtype), checked with that dtype's tolerance.
HostBuffer output_buffer(std::string name, const std::string& dtype, const std::vector<double>& values) {
  const std::size_t n = values.size();
  HostBuffer b;
  if (dtype == "bf16") {
    std::vector<std::uint16_t> bits(n);
    for (std::size_t i = 0; i < n; ++i) bits[i] = float_to_bf16_bits(static_cast<float>(values[i]));
    b = make_buffer(std::move(name), Role::kOutput, DType::kBF16, std::vector<std::uint16_t>(n));
    set_expected(b, bits);
  } else {
    std::vector<float> f(values.begin(), values.end());
    b = make_buffer(std::move(name), Role::kOutput, DType::kF32, std::vector<float>(n));
    set_expected(b, f);
  }
  b.tolerance = tolerance_for(dtype);
  return b;
}

/// What both families share: the row layout's space, problems, constraints
/// and default.
class RowFamily : public Family {
 public:
  std::vector<std::string> source_files() const override { return {kTemplate}; }

  std::vector<Problem> problem_classes() const override {
    // d_model of the small, xl and 2.7B models and of the tiny test model;
    // row counts leave the last block ragged for most layouts.
    return {Problem{"f32", {{"rows", 67}, {"dim", 768}}}, Problem{"bf16", {{"rows", 67}, {"dim", 1600}}},
            Problem{"f32", {{"rows", 19}, {"dim", 2560}}}, Problem{"bf16", {{"rows", 45}, {"dim", 64}}}};
  }

  void check_problem(const Problem& p) const override {
    KTUNE_REQUIRE(p.dtype == "f32" || p.dtype == "bf16",
                  name() + ": dtype '" + p.dtype + "' is not supported; accepted: f32, bf16 (bf16 activations; fp32 "
                  "weight, rstd and math)");
    for (const auto& [k, v] : p.dims)
      KTUNE_REQUIRE(k == "rows" || k == "dim", name() + ": unknown dimension '" + k + "'; accepted: rows, dim");
    KTUNE_REQUIRE(p.dims.count("rows") && p.dim("rows") >= 1 && p.dim("rows") <= (1LL << 31) - 1,
                  name() + ": dimension 'rows' must be in 1..2^31-1");
    KTUNE_REQUIRE(p.dims.count("dim") && p.dim("dim") >= 1 && p.dim("dim") <= max_dim(),
                  fmt::format("{}: dimension 'dim' must be in 1..{} (a row is held in the registers of at most 1024 "
                              "threads, {} elements each)",
                              name(), max_dim(), max_dim() / 1024));
  }

  bool is_valid(const Config& c, const Problem& p, const DeviceLimits& d, std::string* why) const override {
    const std::int64_t threads = c.at("threads"), row_threads = c.at("row_threads"), vec = c.at("vec");
    const std::int64_t dim = p.dim("dim");
    if (threads > d.max_threads_per_block) return reject(why, "threads exceed the device's block limit");
    if (row_threads > threads) return reject(why, "a row's threads must fit in one block (row_threads <= threads)");
    if (vec * activation_bytes(p) > 16)
      return reject(why, fmt::format("a vector access is at most 16 bytes: vec <= {} for {}",
                                     16 / activation_bytes(p), p.dtype));
    if (dim % vec != 0)
      return reject(why, fmt::format("dim {} is not a multiple of vec {}: vector accesses would straddle rows", dim,
                                     vec));
    const std::int64_t held = vec * items(c, p);
    if (held > kMaxElementsPerThread)
      return reject(why, fmt::format("each thread would hold {} elements of its row in registers (at most {}): raise "
                                     "row_threads or vec",
                                     held, kMaxElementsPerThread));
    if (row_threads > kMinRowThreads && row_threads / 2 * vec >= dim)
      return reject(why, "half of each row's threads or more would hold no element: lower row_threads or vec");
    return is_valid_more(c, p, d, why);
  }

  Config default_config(const Problem& p) const override {
    // The widest vector that divides the row, then the fewest threads per row
    // that keep each thread's share of the row small; at least 256 threads per block.
    const DeviceLimits any = DeviceLimits::for_arch("sm_80");
    for (std::int64_t limit : {kDefaultElementsPerThread, std::int64_t{kMaxElementsPerThread}})
      for (std::int64_t vec : {8, 4, 2, 1})
        for (std::int64_t row_threads : space().param("row_threads").values) {
          Config c = default_more(Config({{"threads", std::max<std::int64_t>(256, row_threads)},
                                          {"row_threads", row_threads}, {"vec", vec}}),
                                  p);
          if (vec * items(c, p) <= limit && is_valid(c, p, any, nullptr)) return c;
        }
    throw_error(ErrorKind::kInternal, name() + ": no valid config for " + p.key());
  }

 protected:
  static std::vector<Param> row_params() {
    return {{"threads", {64, 128, 256, 512, 1024}, "threads per block: more rows per block vs more blocks in flight"},
            {"row_threads", {8, 16, 32, 64, 128, 256, 512, 1024},
             "threads per row: up to a warp reduces with shuffles alone, more cut the registers each thread holds"},
            {"vec", {1, 2, 4, 8}, "elements per access (up to 16 bytes): wider loads, fewer instructions"}};
  }
  /// The longest row a family holds in registers.
  virtual std::int64_t max_dim() const { return kMaxDim; }
  /// Constraints and defaults of the parameters a family adds.
  virtual bool is_valid_more(const Config&, const Problem&, const DeviceLimits&, std::string*) const { return true; }
  virtual Config default_more(Config c, const Problem&) const { return c; }

  /// The kernel's template arguments: THREADS, ROW_THREADS, VEC, ITEMS, T.
  static std::string template_args(const Config& c, const Problem& p) {
    return fmt::format("{}, {}, {}, {}, {}", c.at("threads"), c.at("row_threads"), c.at("vec"), items(c, p),
                       activation_type(p));
  }
};

// ---- rmsnorm_fwd ------------------------------------------------------------------

class Forward final : public RowFamily {
 public:
  Forward() : space_(row_params()) {}

  std::string name() const override { return "rmsnorm_fwd"; }
  std::string summary() const override { return "RMSNorm forward: y = x * rstd * w per row, rstd kept"; }
  const Space& space() const override { return space_; }

  Rendered render(const Config& c, const Problem& p) const override {
    return render_template(kTemplate, {"rmsnorm::rmsnorm_fwd<" + template_args(c, p) + ">"}, name());
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    check_problem(p);
    const std::int64_t rows = p.dim("rows"), dim = p.dim("dim");
    const auto n = static_cast<std::size_t>(rows * dim);
    std::mt19937_64 rng(seed);
    std::vector<double> x, w, y(n), rstd(static_cast<std::size_t>(rows));
    Workload wl;
    wl.buffers.push_back(input_buffer("x", p.dtype, activation_rows(rng, rows, dim), x));
    wl.buffers.push_back(input_buffer("w", "f32", random_floats(rng, static_cast<std::size_t>(dim), 0.5f, 1.5f), w));
    rmsnorm_forward<double>(x.data(), w.data(), y.data(), rstd.data(), rows, dim, static_cast<double>(kEps));
    wl.buffers.push_back(output_buffer("y", p.dtype, y));
    wl.buffers.push_back(output_buffer("rstd", "f32", rstd));
    return wl;
  }

  std::vector<Launch> plan(const Config& c, const Problem& p, const std::vector<std::uint64_t>& a,
                           const DeviceLimits&) const override {
    KTUNE_REQUIRE(a.size() == 4, name() + ": expects the addresses of x, w, y, rstd");
    const std::int64_t vec = c.at("vec");
    require_aligned(name(), "x", a[0], vec * activation_bytes(p));
    require_aligned(name(), "w", a[1], std::min<std::int64_t>(16, 4 * vec));
    require_aligned(name(), "y", a[2], vec * activation_bytes(p));
    Launch l;
    l.grid = {static_cast<unsigned>(ceil_div(p.dim("rows"), rows_per_block(c))), 1, 1};
    l.block = {static_cast<unsigned>(c.at("threads")), 1, 1};
    l.args.add(a[0]).add(a[1]).add(a[2]).add(a[3]);
    l.args.add(static_cast<long long>(p.dim("rows"))).add(static_cast<int>(p.dim("dim"))).add(kEps);
    std::vector<Launch> launches;
    launches.push_back(std::move(l));
    return launches;
  }

  double flops(const Problem& p) const override {  // x*x + sum; x*rstd*w
    return 4.0 * static_cast<double>(p.dim("rows")) * static_cast<double>(p.dim("dim"));
  }
  double bytes(const Problem& p) const override {  // read x, write y; w once; rstd
    const double rows = static_cast<double>(p.dim("rows")), dim = static_cast<double>(p.dim("dim"));
    return 2.0 * static_cast<double>(activation_bytes(p)) * rows * dim + 4.0 * dim + 4.0 * rows;
  }

 private:
  Space space_;
};

// ---- rmsnorm_bwd ------------------------------------------------------------------

class Backward final : public RowFamily {
 public:
  Backward() : space_(with_blocks(row_params())) {}

  std::string name() const override { return "rmsnorm_bwd"; }
  std::string summary() const override {
    return "RMSNorm backward: dx per row, dw as per-block partials reduced by a second launch (deterministic)";
  }
  const Space& space() const override { return space_; }

  Rendered render(const Config& c, const Problem& p) const override {
    return render_template(kTemplate,
                           {"rmsnorm::rmsnorm_bwd<" + template_args(c, p) + ">",
                            fmt::format("rmsnorm::rmsnorm_dw_reduce<{}>", c.at("threads"))},
                           name());
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    check_problem(p);
    const std::int64_t rows = p.dim("rows"), dim = p.dim("dim");
    const auto n = static_cast<std::size_t>(rows * dim);
    std::mt19937_64 rng(seed);
    std::vector<double> x, w, dy, y(n), rstd(static_cast<std::size_t>(rows));
    Workload wl;
    wl.buffers.push_back(input_buffer("x", p.dtype, activation_rows(rng, rows, dim), x));
    wl.buffers.push_back(input_buffer("w", "f32", random_floats(rng, static_cast<std::size_t>(dim), 0.5f, 1.5f), w));
    // rstd as the forward leaves it: fp32.
    rmsnorm_forward<double>(x.data(), w.data(), y.data(), rstd.data(), rows, dim, static_cast<double>(kEps));
    std::vector<float> rstd32(rstd.begin(), rstd.end());
    std::copy(rstd32.begin(), rstd32.end(), rstd.begin());
    wl.buffers.push_back(make_buffer("rstd", Role::kInput, DType::kF32, rstd32));
    wl.buffers.push_back(input_buffer("dy", p.dtype, random_floats(rng, n, -1.f, 1.f), dy));
    std::vector<double> dx(n), dw(static_cast<std::size_t>(dim), 0.0);
    rmsnorm_backward<double>(x.data(), w.data(), rstd.data(), dy.data(), dx.data(), dw.data(), rows, dim);
    wl.buffers.push_back(output_buffer("dx", p.dtype, dx));
    wl.buffers.push_back(output_buffer("dw", "f32", dw));
    wl.buffers.push_back(make_buffer("scratch", Role::kScratch, DType::kF32,
                                     std::vector<float>(static_cast<std::size_t>(scratch_floats(p)))));
    return wl;
  }

  std::vector<Launch> plan(const Config& c, const Problem& p, const std::vector<std::uint64_t>& a,
                           const DeviceLimits&) const override {
    KTUNE_REQUIRE(a.size() == 7, name() + ": expects the addresses of x, w, rstd, dy, dx, dw, scratch");
    const std::int64_t vec = c.at("vec");
    require_aligned(name(), "x", a[0], vec * activation_bytes(p));
    require_aligned(name(), "w", a[1], std::min<std::int64_t>(16, 4 * vec));
    require_aligned(name(), "dy", a[3], vec * activation_bytes(p));
    require_aligned(name(), "dx", a[4], vec * activation_bytes(p));
    require_aligned(name(), "scratch", a[6], std::min<std::int64_t>(16, 4 * vec));
    const std::int64_t rows = p.dim("rows"), dim = p.dim("dim");
    const std::int64_t blocks = std::min(c.at("blocks"), ceil_div(rows, rows_per_block(c)));
    const auto threads = static_cast<unsigned>(c.at("threads"));
    std::vector<Launch> launches(2);
    launches[0].kernel = 0;
    launches[0].grid = {static_cast<unsigned>(blocks), 1, 1};
    launches[0].block = {threads, 1, 1};
    launches[0].args.add(a[0]).add(a[1]).add(a[2]).add(a[3]).add(a[4]).add(a[6]);
    launches[0].args.add(static_cast<long long>(rows)).add(static_cast<int>(dim));
    launches[1].kernel = 1;
    launches[1].grid = {static_cast<unsigned>(ceil_div(dim, kReduceColumns)), 1, 1};
    launches[1].block = {threads, 1, 1};
    launches[1].args.add(a[6]).add(a[5]).add(static_cast<int>(blocks)).add(static_cast<int>(dim));
    return launches;
  }

  double flops(const Problem& p) const override {  // dot (3), dx (4), dw (3) per element
    return 10.0 * static_cast<double>(p.dim("rows")) * static_cast<double>(p.dim("dim"));
  }
  double bytes(const Problem& p) const override {  // read x, dy, write dx; w, dw once; rstd
    const double rows = static_cast<double>(p.dim("rows")), dim = static_cast<double>(p.dim("dim"));
    return 3.0 * static_cast<double>(activation_bytes(p)) * rows * dim + 8.0 * dim + 4.0 * rows;
  }

 protected:
  std::int64_t max_dim() const override { return kMaxBackwardDim; }
  bool is_valid_more(const Config& c, const Problem& p, const DeviceLimits& d, std::string* why) const override {
    // Each thread keeps its share of x and dy (packed as T) and of the dw sums
    // (fp32) in registers, beside ~24 for addresses and indices (fitted to
    // ptxas's counts); beyond the block's register budget the share spills.
    const std::int64_t held = c.at("vec") * items(c, p);
    const std::int64_t registers = kBaseRegisters + held * (2 * activation_bytes(p) / 4 + 1);
    const std::int64_t budget = std::min<std::int64_t>(d.max_regs_per_thread, d.regs_per_sm / c.at("threads"));
    if (registers > budget)
      return reject(why, fmt::format("each thread would need about {} registers for its share of x, dy and dw, over "
                                     "the {} a block of {} threads allows: it would spill",
                                     registers, budget, c.at("threads")));
    const std::int64_t groups = ceil_div(p.dim("rows"), rows_per_block(c));
    if (c.at("blocks") > kMinBlocks && c.at("blocks") / 2 >= groups)
      return reject(why, fmt::format("only {} row groups: a smaller `blocks` already gives each its own block",
                                     groups));
    return true;
  }
  Config default_more(Config c, const Problem& p) const override {
    // About two blocks per SM, fewer when the rows run out.
    const std::int64_t groups = ceil_div(p.dim("rows"), rows_per_block(c));
    std::int64_t blocks = 256;
    while (blocks > kMinBlocks && blocks / 2 >= groups) blocks /= 2;
    c.set("blocks", blocks);
    return c;
  }

 private:
  static std::vector<Param> with_blocks(std::vector<Param> params) {
    params.push_back({"blocks", {kMinBlocks, 128, 256, 512, kMaxBlocks},
                      "blocks (and dw partials) of the dx launch: more fill the GPU, fewer shorten the dw reduction"});
    return params;
  }
  Space space_;
};

}  // namespace

std::int64_t scratch_floats(const Problem& p) { return kMaxBlocks * p.dim("dim"); }

const Family& forward_family() {
  static const Forward f;
  return f;
}
const Family& backward_family() {
  static const Backward f;
  return f;
}

}  // namespace ktune::templates::rmsnorm
