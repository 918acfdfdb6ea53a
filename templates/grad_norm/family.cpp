// The grad_norm family: space, constraints, rendering, launch plan, workload
// with its CPU reference, FLOP/byte counts.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "base/error.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/grad_norm/grad_norm.hpp"
#include "templates/render.hpp"

namespace ktune::templates::grad_norm {
namespace {

constexpr const char* kTemplate = "grad_norm/grad_norm.cuh";
constexpr std::size_t kMaxTensors = 64;  // GradList<MAX_TENSORS> of one launch: 1.3 KB of kernel parameters
constexpr unsigned kFinishThreads = 512;  // grad_norm_finish: one block adds every partial
/// The workloads' clip threshold: their gradients' norm is several times
/// larger (every element of magnitude up to 0.1..1), so the clip launch scales.
constexpr float kWorkloadMaxNorm = 1.0f;

/// The kernel parameter block of grad_norm::GradList<kMaxTensors> for tensors
/// [first, first + count), and the chunks it holds.
std::vector<std::byte> grad_list(const std::vector<Tensor>& tensors, std::size_t first, std::size_t count,
                                 std::int64_t chunk, std::int64_t* chunks) {
  const std::size_t T = kMaxTensors;
  std::vector<std::uint64_t> words(2 * T, 0);
  std::vector<std::int32_t> ints(T + 2, 0);  // chunk_begin[T + 1], then count
  *chunks = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const Tensor& t = tensors[first + i];
    words[i] = t.grad;
    words[T + i] = static_cast<std::uint64_t>(t.numel);
    ints[i] = static_cast<std::int32_t>(*chunks);
    *chunks += ceil_div(t.numel, chunk);
    KTUNE_REQUIRE(*chunks < (1LL << 31), "grad_norm: too many chunks in one launch; raise `chunk`");
  }
  for (std::size_t i = count; i <= T; ++i) ints[i] = static_cast<std::int32_t>(*chunks);
  ints[T + 1] = static_cast<std::int32_t>(count);
  std::vector<std::byte> blob(words.size() * 8 + ints.size() * 4);
  std::memcpy(blob.data(), words.data(), words.size() * 8);
  std::memcpy(blob.data() + words.size() * 8, ints.data(), ints.size() * 4);
  blob.resize((blob.size() + 7) / 8 * 8);
  return blob;
}

class GradNorm final : public GradNormFamily {
 public:
  /// The clip threshold: the factor is min(1, max_norm / (norm + 1e-6)), and a problem `in_place` scales the
  /// gradients by it; <= 0 computes the norm only (the factor 1) and leaves them.
  Scalars scalars(const Problem&) const override { return {{"max_norm", shortest(kWorkloadMaxNorm)}}; }
  void set_scalars(Args& args, const Problem& p, const Scalars& s) const override {
    args.max_norm = f32_scalar(name(), "max_norm", s.at("max_norm"));
    args.clip = scales_in_place(p) && args.max_norm > 0;
  }
  GradNorm()
      : space_({{"threads", {128, 256, 512, 1024}, "threads per block: more loads in flight per chunk vs more blocks"},
                {"vec", {1, 2, 4}, "floats per access: wider loads, fewer instructions"},
                {"chunk",
                 {4096, 16384, 65536},
                 "elements per partial: small chunks balance short tensors, large "
                 "ones shorten the final sum"},
                {"blocks_per_sm", {2, 4, 8}, "persistent grid size: more blocks hide latency, fewer cut scheduling"}}) {
  }

  std::string name() const override { return "grad_norm"; }
  std::string summary() const override {
    return "global L2 norm of all gradients (multi-tensor, deterministic two-level sum) and the clip factor, "
           "applied in place where the problem's in_place is 1";
  }
  std::vector<std::string> source_files() const override { return {kTemplate}; }
  const Space& space() const override { return space_; }

  std::vector<Problem> problem_classes() const override {
    // Odd sizes leave scalar tails and ragged last chunks; 70 tensors take two launches. A fused optimizer reads
    // the factor (in_place 0); a plain one is given the gradients scaled (in_place 1).
    return {Problem{"f32", {{"tensors", 3}, {"numel", 4999}, {"in_place", 1}}},
            Problem{"f32", {{"tensors", 70}, {"numel", 333}, {"in_place", 1}}},
            Problem{"f32", {{"tensors", 3}, {"numel", 4999}, {"in_place", 0}}}};
  }

  void check_problem(const Problem& p) const override {
    KTUNE_REQUIRE(p.dtype == "f32", name() + ": dtype '" + p.dtype +
                                        "' is not supported; accepted: f32 (gradients are fp32 in every mode)");
    for (const auto& [k, v] : p.dims)
      KTUNE_REQUIRE(k == "tensors" || k == "numel" || k == "in_place",
                    name() + ": unknown dimension '" + k + "'; accepted: tensors, numel, in_place");
    KTUNE_REQUIRE(p.dims.count("tensors") && p.dim("tensors") >= 1 && p.dim("tensors") <= 4096,
                  name() + ": dimension 'tensors' must be in 1..4096");
    KTUNE_REQUIRE(p.dims.count("numel") && p.dim("numel") >= 1 && p.dim("numel") <= (1LL << 31) - 1,
                  name() + ": dimension 'numel' must be in 1..2^31-1");
    KTUNE_REQUIRE(p.dims.count("in_place") && (p.dim("in_place") == 0 || p.dim("in_place") == 1),
                  name() + ": dimension 'in_place' must be 0 or 1 (1: the gradients scaled by the clip factor in "
                           "place, a launch of its own; 0: the norm and the factor only, for an optimizer that "
                           "reads the factor)");
  }

  Config default_config(const Problem&) const override {
    return Config({{"threads", 512}, {"vec", 4}, {"chunk", 16384}, {"blocks_per_sm", 4}});
  }

  bool is_valid(const Config& c, const Problem& p, const DeviceLimits& d, std::string* why) const override {
    (void)p;
    if (c.at("threads") > d.max_threads_per_block)
      return reject(why, fmt::format("{} threads per block; the device allows {}", c.at("threads"),
                                     d.max_threads_per_block));
    if (c.at("chunk") < c.at("threads") * c.at("vec"))
      return reject(why, "a chunk smaller than one block-wide step leaves threads idle");
    return true;
  }

  Rendered render(const Config& c, const Problem&) const override {
    const auto threads = c.at("threads"), vec = c.at("vec");
    return render_template(kTemplate,
                           {fmt::format("grad_norm::grad_norm_partials<{}, {}, {}>", threads, vec, kMaxTensors),
                            fmt::format("grad_norm::grad_norm_finish<{}>", kFinishThreads),
                            fmt::format("grad_norm::grad_norm_scale<{}, {}, {}>", threads, vec, kMaxTensors)},
                           name());
  }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    check_problem(p);
    std::vector<BufferShape> b;
    for (std::int64_t t = 0; t < p.dim("tensors"); ++t)
      b.push_back(buffer_shape("grad[" + std::to_string(t) + "]",
                               scales_in_place(p) ? Role::kInOut : Role::kInput, DType::kF32, p.dim("numel")));
    b.push_back(buffer_shape("out", Role::kOutput, DType::kF32, 2));
    b.push_back(buffer_shape("scratch", Role::kScratch, DType::kF32, max_partials(p)));
    return b;
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override { return make_workload(p, seed, {}); }
  Workload make_workload(const Problem& p, std::uint64_t seed, const Scalars& given) const override {
    check_problem(p);
    const float max_norm = args_with_scalars(p, given).max_norm;
    const auto n = static_cast<std::size_t>(p.dim("numel"));
    std::mt19937_64 rng(seed);
    std::vector<std::vector<double>> grads;
    for (std::int64_t t = 0; t < p.dim("tensors"); ++t) {
      // Tensors of different scales, as a model's gradients are.
      const float scale = std::pow(10.f, random_floats(rng, 1, -1.f, 0.f)[0]);
      grads.push_back(stored_as(DType::kF32, random_floats(rng, n, -scale, scale)));
    }
    Workload w;
    for (std::size_t t = 0; t < grads.size(); ++t)
      w.buffers.push_back(input_buffer("grad[" + std::to_string(t) + "]", DType::kF32, grads[t]));
    const double norm = clip_by_norm(grads, max_norm);
    if (scales_in_place(p))
      for (std::size_t t = 0; t < grads.size(); ++t) {
        HostBuffer& b = w.buffers[t];
        b.role = Role::kInOut;
        set_expected(b, std::vector<float>(grads[t].begin(), grads[t].end()));
      }
    const double factor = clip_factor(norm, max_norm);
    w.buffers.push_back(output_buffer("out", DType::kF32, {norm, factor}));
    w.buffers.push_back(make_buffer("scratch", Role::kScratch, DType::kF32,
                                    std::vector<float>(static_cast<std::size_t>(max_partials(p)))));
    return w;
  }

  Args args_of(const Problem& p, const std::vector<std::uint64_t>& a) const override {
    check_problem(p);
    const auto tensors = static_cast<std::size_t>(p.dim("tensors"));
    KTUNE_REQUIRE(a.size() == tensors + 2,
                  fmt::format("{}: {} buffer addresses given, the workload has {} (grad for each of {} tensors, then "
                              "out, scratch)",
                              name(), a.size(), tensors + 2, tensors));
    Args args;
    for (std::size_t t = 0; t < tensors; ++t) args.tensors.push_back({a[t], p.dim("numel")});
    args.out = a[tensors];
    args.workspace = a[tensors + 1];
    args.clip = scales_in_place(p);
    args.max_norm = kWorkloadMaxNorm;
    return args;
  }

  std::size_t workspace_bytes(const Config& c, const Problem& p) const override {
    return static_cast<std::size_t>(p.dim("tensors") * ceil_div(p.dim("numel"), c.at("chunk"))) * sizeof(float);
  }

  std::vector<Launch> plan(const Config& c, const Problem& p, const Args& a, const DeviceLimits& d) const override {
    check_problem(p);
    KTUNE_REQUIRE(a.out != 0, name() + ": no `out` buffer (2 floats: norm, clip factor)");
    KTUNE_REQUIRE(!a.tensors.empty(), name() + ": no tensors");
    const std::int64_t needed = partial_floats(c, a.tensors);
    KTUNE_REQUIRE(a.workspace != 0, fmt::format("{}: no workspace given; the tensors need {} bytes", name(),
                                                needed * 4));
    require_aligned(name(), "workspace", a.workspace, 4, "fp32 partials");
    const std::int64_t chunk = c.at("chunk");
    const auto threads = static_cast<unsigned>(c.at("threads"));
    std::vector<Launch> launches;
    std::vector<Launch> scales;
    std::int64_t first_chunk = 0;
    for (std::size_t first = 0; first < a.tensors.size(); first += kMaxTensors) {
      const std::size_t count = std::min(kMaxTensors, a.tensors.size() - first);
      std::int64_t chunks = 0;
      const auto blob = grad_list(a.tensors, first, count, chunk, &chunks);
      if (chunks == 0) continue;
      Launch l;
      l.kernel = 0;
      l.grid = {grid_stride_blocks(chunks, c.at("blocks_per_sm"), d), 1, 1};
      l.block = {threads, 1, 1};
      l.args.add_bytes(blob.data(), blob.size(), 8).add(static_cast<long long>(chunk)).add(a.workspace);
      l.args.add(static_cast<int>(first_chunk));
      Launch s = l;
      s.kernel = 2;
      s.args = {};
      s.args.add_bytes(blob.data(), blob.size(), 8).add(static_cast<long long>(chunk)).add(a.out + sizeof(float));
      launches.push_back(std::move(l));
      scales.push_back(std::move(s));
      first_chunk += chunks;
    }
    KTUNE_REQUIRE(first_chunk < (1LL << 31), "grad_norm: too many chunks; raise `chunk`");
    Launch f;
    f.kernel = 1;
    f.grid = {1, 1, 1};
    f.block = {kFinishThreads, 1, 1};
    f.args.add(a.workspace).add(static_cast<int>(first_chunk)).add(a.max_norm).add(a.out);
    launches.push_back(std::move(f));
    if (a.clip) launches.insert(launches.end(), scales.begin(), scales.end());
    return launches;
  }

  double flops(const Problem& p) const override {  // square and add, then scale where in place
    const double n = static_cast<double>(p.dim("tensors")) * static_cast<double>(p.dim("numel"));
    return (scales_in_place(p) ? 3.0 : 2.0) * n;
  }
  double bytes(const Problem& p) const override {  // every gradient read for the norm, then read and scaled if so
    const double n = static_cast<double>(p.dim("tensors")) * static_cast<double>(p.dim("numel"));
    return (scales_in_place(p) ? 12.0 : 4.0) * n;
  }
  // The workload's gradients, clipped in place, would need no scaling from the second launch on.
  bool timing_restores_inouts() const override { return true; }

 private:
  static bool scales_in_place(const Problem& p) { return p.dim("in_place") != 0; }
  /// The workspace every config of the space fits in: the smallest chunk's partials.
  std::int64_t max_partials(const Problem& p) const {
    return p.dim("tensors") * ceil_div(p.dim("numel"), space_.param("chunk").values.front());
  }
  Space space_;
};

}  // namespace

std::int64_t partial_floats(const Config& config, const std::vector<Tensor>& tensors) {
  std::int64_t n = 0;
  for (const Tensor& t : tensors) n += ceil_div(t.numel, config.at("chunk"));
  return n;
}

const GradNormFamily& family() {
  static const GradNorm f;
  return f;
}

}  // namespace ktune::templates::grad_norm
