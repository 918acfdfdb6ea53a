// The primitive families: one class, one op per registered family. Spaces
// of one point, problems, rendering, launch plans, workloads with the fp64
// reference of each op.
#include "templates/eager/primitive.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>

#include "base/error.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/render.hpp"

namespace ktune::templates::eager {
namespace {

constexpr const char* kTemplate = "eager/primitive.cuh";
constexpr std::int64_t kThreads = 256;
constexpr std::int64_t kMaxCols = (std::int64_t{1} << 31) - 1;  // column indices are 32-bit

enum class Kind { kUnary, kBinary, kRowReduce, kColSum, kGather, kScatterAdd };

constexpr std::array<const char*, 10> kUnaryNames = {"neg",  "exp",     "log",    "rsqrt", "sqrt",
                                                     "silu", "sigmoid", "square", "scale", "add_scalar"};
constexpr std::array<const char*, 6> kBinaryNames = {"add", "sub", "mul", "div", "silu_backward", "rsqrt_backward"};
constexpr std::array<const char*, 3> kReduceNames = {"sum", "max", "mean"};

/// Workload scalars: what args_of passes for the workload's expected values.
constexpr float kWorkloadAlpha = 0.75f;
constexpr float kScatterAlpha = -1.0f;

class Primitive final : public PrimitiveFamily {
 public:
  Primitive(Kind kind, int op) : kind_(kind), op_(op), space_({{"threads", {kThreads}, "one config: untuned"}}) {}

  std::string name() const override {
    switch (kind_) {
      case Kind::kUnary: return fmt::format("prim_{}", kUnaryNames[op_]);
      case Kind::kBinary: return fmt::format("prim_{}", kBinaryNames[op_]);
      case Kind::kRowReduce: return fmt::format("prim_row_{}", kReduceNames[op_]);
      case Kind::kColSum: return "prim_col_sum";
      case Kind::kGather: return "prim_gather";
      case Kind::kScatterAdd: return "prim_scatter_add";
    }
    return "";
  }
  std::string summary() const override {
    switch (kind_) {
      case Kind::kUnary: return fmt::format("eager primitive: y = {}(x), elementwise", kUnaryNames[op_]);
      case Kind::kBinary:
        return fmt::format("eager primitive: y = {}(a, b), b broadcast over rows and/or columns", kBinaryNames[op_]);
      case Kind::kRowReduce: return fmt::format("eager primitive: the {} of each row", kReduceNames[op_]);
      case Kind::kColSum: return "eager primitive: the sum of each column";
      case Kind::kGather: return "eager primitive: y[r] = x[r, idx[r]]";
      case Kind::kScatterAdd: return "eager primitive: y[r, idx[r]] += alpha, in place";
    }
    return "";
  }
  std::vector<std::string> source_files() const override { return {kTemplate}; }
  const Space& space() const override { return space_; }

  std::vector<Problem> problem_classes() const override {
    // Ragged sizes: no multiple of the block or of a warp.
    if (kind_ == Kind::kUnary) return {Problem{"f32", {{"n", 4999}}}, Problem{"bf16", {{"n", 1001}}}};
    if (kind_ == Kind::kBinary)
      return {Problem{"f32", {{"rows", 37}, {"cols", 101}, {"b_rows", 1}, {"b_cols", 101}}},
              Problem{"bf16", {{"rows", 37}, {"cols", 101}, {"b_rows", 37}, {"b_cols", 1}}}};
    return {Problem{"f32", {{"rows", 37}, {"cols", 1001}}}, Problem{"bf16", {{"rows", 19}, {"cols", 333}}}};
  }

  void check_problem(const Problem& p) const override {
    KTUNE_REQUIRE(p.dtype == "f32" || p.dtype == "bf16",
                  fmt::format("{}: dtype '{}' is not supported; accepted: f32, bf16", name(), p.dtype));
    const std::vector<std::string> dims = kind_ == Kind::kUnary    ? std::vector<std::string>{"n"}
                                          : kind_ == Kind::kBinary ? std::vector<std::string>{"rows", "cols", "b_rows",
                                                                                              "b_cols"}
                                                                   : std::vector<std::string>{"rows", "cols"};
    std::string accepted;
    for (const auto& d : dims) accepted += (accepted.empty() ? "" : ", ") + d;
    for (const auto& [k, v] : p.dims)
      KTUNE_REQUIRE(std::find(dims.begin(), dims.end(), k) != dims.end(),
                    fmt::format("{}: unknown dimension '{}'; accepted: {}", name(), k, accepted));
    for (const auto& d : dims)
      KTUNE_REQUIRE(p.dims.count(d) && p.dim(d) >= 1 && p.dim(d) <= (d == "cols" ? kMaxCols : (1LL << 40)),
                    fmt::format("{}: dimension '{}' must be in 1..{}", name(), d, d == "cols" ? "2^31-1" : "2^40"));
    if (kind_ == Kind::kBinary) {
      KTUNE_REQUIRE(p.dim("b_rows") == 1 || p.dim("b_rows") == p.dim("rows"),
                    name() + ": 'b_rows' must be 1 (b repeated over the rows) or 'rows'");
      KTUNE_REQUIRE(p.dim("b_cols") == 1 || p.dim("b_cols") == p.dim("cols"),
                    name() + ": 'b_cols' must be 1 (b repeated across the columns) or 'cols'");
    }
  }

  Config default_config(const Problem&) const override { return Config({{"threads", kThreads}}); }
  bool is_valid(const Config& c, const Problem& p, const DeviceLimits& d, std::string* why) const override {
    check_problem(p);
    if (c.at("threads") > d.max_threads_per_block)
      return reject(why, fmt::format("{} threads per block; the device allows {}", c.at("threads"),
                                     d.max_threads_per_block));
    if (kind_ == Kind::kRowReduce && p.dim("rows") > 0x7fffffff)
      return reject(why, "a block per row: more rows than a grid holds (2^31-1)");
    return true;
  }

  Rendered render(const Config& c, const Problem& p) const override {
    const auto t = c.at("threads");
    const char* T = activation_type(p);
    std::string kernel;
    switch (kind_) {
      case Kind::kUnary: kernel = fmt::format("prim::unary<{}, {}, {}>", t, op_, T); break;
      case Kind::kBinary: kernel = fmt::format("prim::binary<{}, {}, {}>", t, op_, T); break;
      case Kind::kRowReduce: kernel = fmt::format("prim::row_reduce<{}, {}, {}>", t, op_, T); break;
      case Kind::kColSum: kernel = fmt::format("prim::col_sum<{}, {}>", t, T); break;
      case Kind::kGather: kernel = fmt::format("prim::gather<{}, {}>", t, T); break;
      case Kind::kScatterAdd: kernel = fmt::format("prim::scatter_add<{}, {}>", t, T); break;
    }
    return render_template(kTemplate, {kernel}, name());
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    check_problem(p);
    std::mt19937_64 rng(seed);
    const DType dt = activation_dtype(p);
    // Inputs where every op is defined and well conditioned: positive for log, rsqrt, sqrt, and a divisor.
    const bool positive = (kind_ == Kind::kUnary && (op_ == static_cast<int>(Unary::kLog) ||
                                                     op_ == static_cast<int>(Unary::kRsqrt) ||
                                                     op_ == static_cast<int>(Unary::kSqrt)));
    auto values = [&](std::int64_t n, bool pos) {
      return stored_as(dt, random_floats(rng, static_cast<std::size_t>(n), pos ? 0.5f : -2.f, 2.f));
    };
    Workload w;
    if (kind_ == Kind::kUnary) {
      const auto x = values(p.dim("n"), positive);
      std::vector<double> y(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) y[i] = unary_reference(static_cast<Unary>(op_), x[i], kWorkloadAlpha);
      w.buffers.push_back(input_buffer("x", dt, x));
      w.buffers.push_back(output_buffer("y", dt, y));
      return w;
    }
    const std::int64_t rows = p.dim("rows"), cols = p.dim("cols");
    if (kind_ == Kind::kBinary) {
      const std::int64_t br = p.dim("b_rows"), bc = p.dim("b_cols");
      const auto a = values(rows * cols, false);
      const auto b = values(br * bc, op_ == static_cast<int>(Binary::kDiv));
      std::vector<double> y(a.size());
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c)
          y[static_cast<std::size_t>(r * cols + c)] =
              binary_reference(static_cast<Binary>(op_), a[static_cast<std::size_t>(r * cols + c)],
                               b[static_cast<std::size_t>((br == 1 ? 0 : r) * bc + (bc == 1 ? 0 : c))]);
      w.buffers.push_back(input_buffer("a", dt, a));
      w.buffers.push_back(input_buffer("b", dt, b));
      w.buffers.push_back(output_buffer("y", dt, y));
      return w;
    }
    const auto x = values(rows * cols, false);
    auto at = [&](std::int64_t r, std::int64_t c) { return x[static_cast<std::size_t>(r * cols + c)]; };
    std::vector<std::int32_t> idx(static_cast<std::size_t>(rows));
    for (auto& i : idx) i = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(cols));
    if (kind_ == Kind::kScatterAdd) {
      std::vector<double> y = x;
      for (std::int64_t r = 0; r < rows; ++r) y[static_cast<std::size_t>(r * cols + idx[static_cast<std::size_t>(r)])] += kScatterAlpha;
      HostBuffer b = input_buffer("y", dt, x);
      b.role = Role::kInOut;
      b.expected = output_buffer("y", dt, y).expected;
      b.tolerance = tolerance_for(p.dtype);
      w.buffers.push_back(std::move(b));
      w.buffers.push_back(make_buffer("idx", Role::kInput, DType::kI32, idx));
      return w;
    }
    std::vector<double> y(static_cast<std::size_t>(kind_ == Kind::kColSum ? cols : rows), 0.0);
    for (std::int64_t r = 0; r < rows; ++r) {
      double acc = kind_ == Kind::kRowReduce && op_ == static_cast<int>(Reduce::kMax) ? -INFINITY : 0.0;
      for (std::int64_t c = 0; c < cols; ++c) {
        if (kind_ == Kind::kColSum) y[static_cast<std::size_t>(c)] += at(r, c);
        else acc = op_ == static_cast<int>(Reduce::kMax) ? std::max(acc, at(r, c)) : acc + at(r, c);
      }
      if (kind_ == Kind::kRowReduce)
        y[static_cast<std::size_t>(r)] = op_ == static_cast<int>(Reduce::kMean) ? acc / static_cast<double>(cols) : acc;
      if (kind_ == Kind::kGather) y[static_cast<std::size_t>(r)] = at(r, idx[static_cast<std::size_t>(r)]);
    }
    w.buffers.push_back(input_buffer("x", dt, x));
    if (kind_ == Kind::kGather) w.buffers.push_back(make_buffer("idx", Role::kInput, DType::kI32, idx));
    w.buffers.push_back(output_buffer("y", dt, y));
    return w;
  }

  PrimArgs args_of(const Problem&, const std::vector<std::uint64_t>& a) const override {
    switch (kind_) {
      case Kind::kUnary:
        require_addresses(name(), a, {"x", "y"});
        return {.x = a[0], .y = a[1], .alpha = kWorkloadAlpha};
      case Kind::kBinary: require_addresses(name(), a, {"a", "b", "y"}); return {.x = a[0], .b = a[1], .y = a[2]};
      case Kind::kGather:
        require_addresses(name(), a, {"x", "idx", "y"});
        return {.x = a[0], .idx = a[1], .y = a[2]};
      case Kind::kScatterAdd:
        require_addresses(name(), a, {"y", "idx"});
        return {.idx = a[1], .y = a[0], .alpha = kScatterAlpha};
      default: require_addresses(name(), a, {"x", "y"}); return {.x = a[0], .y = a[1]};
    }
  }

  std::vector<Launch> plan(const Config& c, const Problem& p, const PrimArgs& a, const DeviceLimits&) const override {
    check_problem(p);
    const std::int64_t t = c.at("threads");
    Launch l;
    l.kernel = 0;
    l.block = {static_cast<unsigned>(t), 1, 1};
    auto grid = [&](std::int64_t n) {
      KTUNE_REQUIRE(ceil_div(n, t) <= 0x7fffffff, name() + ": too many elements for one launch");
      return dim3_x(ceil_div(n, t));
    };
    if (kind_ == Kind::kUnary) {
      l.grid = grid(p.dim("n"));
      l.args.add(a.x).add(a.y).add(static_cast<long long>(p.dim("n"))).add(a.alpha);
    } else {
      const auto rows = static_cast<long long>(p.dim("rows"));
      const auto cols = p.dim("cols");
      switch (kind_) {
        case Kind::kBinary: {
          const long long row_stride = p.dim("b_rows") == 1 ? 0 : p.dim("b_cols");
          const long long col_stride = p.dim("b_cols") == 1 ? 0 : 1;
          l.grid = grid(rows * cols);
          l.args.add(a.x).add(a.b).add(a.y).add(rows).add(static_cast<long long>(cols)).add(row_stride).add(col_stride);
          break;
        }
        case Kind::kRowReduce:
          l.grid = dim3_x(rows);
          l.args.add(a.x).add(a.y).add(rows).add(static_cast<int>(cols));
          break;
        case Kind::kColSum:
          l.grid = grid(cols);
          l.args.add(a.x).add(a.y).add(rows).add(static_cast<int>(cols));
          break;
        case Kind::kGather:
          l.grid = grid(rows);
          l.args.add(a.x).add(a.idx).add(a.y).add(rows).add(static_cast<int>(cols));
          break;
        case Kind::kScatterAdd:
          l.grid = grid(rows);
          l.args.add(a.y).add(a.idx).add(rows).add(static_cast<int>(cols)).add(a.alpha);
          break;
        default: break;
      }
    }
    return {std::move(l)};
  }

  double flops(const Problem& p) const override { return static_cast<double>(elements(p)); }
  double bytes(const Problem& p) const override {  // every input read once, the output written once
    const double e = static_cast<double>(elements(p)), s = static_cast<double>(activation_bytes(p));
    switch (kind_) {
      case Kind::kUnary: return 2.0 * e * s;
      case Kind::kBinary:
        return (2.0 * e + static_cast<double>(p.dim("b_rows") * p.dim("b_cols"))) * s;
      case Kind::kRowReduce: return (e + static_cast<double>(p.dim("rows"))) * s;
      case Kind::kColSum: return (e + static_cast<double>(p.dim("cols"))) * s;
      default: return static_cast<double>(p.dim("rows")) * (2.0 * s + 4.0);  // gather, scatter: a value and an index per row
    }
  }

 private:
  static std::array<unsigned, 3> dim3_x(std::int64_t n) { return {static_cast<unsigned>(n), 1, 1}; }
  std::int64_t elements(const Problem& p) const {
    return kind_ == Kind::kUnary ? p.dim("n") : p.dim("rows") * p.dim("cols");
  }
  Kind kind_;
  int op_;
  Space space_;
};

template <std::size_t N>
std::array<Primitive, N> make_all(Kind kind) {
  return [kind]<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<Primitive, N>{Primitive(kind, static_cast<int>(I))...};
  }(std::make_index_sequence<N>{});
}

const std::array<Primitive, kUnaryNames.size()>& unaries() {
  static const auto all = make_all<kUnaryNames.size()>(Kind::kUnary);
  return all;
}
const std::array<Primitive, kBinaryNames.size()>& binaries() {
  static const auto all = make_all<kBinaryNames.size()>(Kind::kBinary);
  return all;
}
const std::array<Primitive, kReduceNames.size()>& reductions() {
  static const auto all = make_all<kReduceNames.size()>(Kind::kRowReduce);
  return all;
}

}  // namespace

const PrimitiveFamily& unary_family(Unary op) { return unaries().at(static_cast<std::size_t>(op)); }
const PrimitiveFamily& binary_family(Binary op) { return binaries().at(static_cast<std::size_t>(op)); }
const PrimitiveFamily& row_reduce_family(Reduce op) { return reductions().at(static_cast<std::size_t>(op)); }
const PrimitiveFamily& col_sum_family() {
  static const Primitive f(Kind::kColSum, 0);
  return f;
}
const PrimitiveFamily& gather_family() {
  static const Primitive f(Kind::kGather, 0);
  return f;
}
const PrimitiveFamily& scatter_add_family() {
  static const Primitive f(Kind::kScatterAdd, 0);
  return f;
}

std::vector<const Family*> primitive_families() {
  std::vector<const Family*> out;
  for (const auto& f : unaries()) out.push_back(&f);
  for (const auto& f : binaries()) out.push_back(&f);
  for (const auto& f : reductions()) out.push_back(&f);
  out.push_back(&col_sum_family());
  out.push_back(&gather_family());
  out.push_back(&scatter_add_family());
  return out;
}

}  // namespace ktune::templates::eager
