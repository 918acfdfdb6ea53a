// SpecFamily: a kernel spec behind the family interface (see spec_family.hpp).
#include "spec/spec_family.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <regex>
#include <sstream>
#include <tuple>

#include "base/error.hpp"
#include "base/files.hpp"
#include "base/hash.hpp"
#include "templates/render.hpp"
#include "tuner/exec/backend.hpp"

namespace ktune::spec {
namespace {

/// A buffer's tolerance where the spec gives none: integers exact; floats the looser of the buffer's own dtype's
/// (a bf16 output of an f32 problem holds 8 bits of mantissa) and, for a problem of floats, the problem's dtype's
/// (an f32 output computed from bf16 inputs).
double default_tolerance(const std::string& problem_dtype, templates::DType buffer) {
  if (templates::is_integer(buffer)) return 0.0;
  const double own = templates::tolerance_for(templates::to_string(buffer));
  for (const char* d : {"f32", "tf32", "bf16", "f16"})
    if (problem_dtype == d) return std::max(own, templates::tolerance_for(problem_dtype));
  return own;
}

using templates::DType;
using templates::HostBuffer;
using templates::Launch;
using templates::Problem;
using templates::Role;

constexpr long long kMaxElements = 1LL << 36;
constexpr long long kMaxGrid = (1LL << 31) - 1;
/// CUDA's limits on each dimension of a launch, every architecture's: gridDim.y and .z, blockDim.z.
constexpr std::array<long long, 3> kMaxGridDims = {kMaxGrid, 65535, 65535};
constexpr std::array<long long, 3> kMaxBlockDims = {1024, 1024, 64};
constexpr std::array<const char*, 3> kAxes = {"x", "y", "z"};

/// `n` random values of `t`: floats uniform in [-1, 1), integers in [-8, 8) (u8: [0, 256)).
std::vector<std::byte> random_bytes(DType t, std::size_t n, std::mt19937_64& rng) {
  std::vector<std::byte> out(n * templates::size_of(t));
  auto put = [&](std::size_t i, auto value) { std::memcpy(out.data() + i * sizeof(value), &value, sizeof(value)); };
  std::uniform_int_distribution<int> small(-8, 7), byte(0, 255);
  const auto floats = (t == DType::kF32 || t == DType::kBF16 || t == DType::kF16)
                          ? templates::random_floats(rng, n, -1.f, 1.f)
                          : std::vector<float>();
  for (std::size_t i = 0; i < n; ++i) {
    switch (t) {
      case DType::kF32: put(i, floats[i]); break;
      case DType::kBF16: put(i, templates::float_to_bf16_bits(floats[i])); break;
      case DType::kF16: put(i, templates::float_to_f16_bits(floats[i])); break;
      case DType::kI32: put(i, static_cast<std::int32_t>(small(rng))); break;
      case DType::kI64: put(i, static_cast<std::int64_t>(small(rng))); break;
      case DType::kU8: put(i, static_cast<std::uint8_t>(byte(rng))); break;
    }
  }
  return out;
}

/// Appends scalar argument `a` at `v`; an integer type takes a whole number in its range, or the launch is
/// refused (a dimension past 2^31 cast to an `i32` reached the kernel as a negative count).
void add_scalar(templates::ArgPack& pack, const ArgSpec& a, const Values& v) {
  using Limits32 = std::numeric_limits<std::int32_t>;
  constexpr long long kMax = std::numeric_limits<long long>::max();
  const auto whole = [&](long long lo, long long hi) {
    return a.value->eval_integer(v, lo, hi, "the range of " + a.type);
  };
  if (a.type == "f32") {
    const double x = a.value->eval(v);
    KTUNE_REQUIRE(!std::isfinite(x) || std::abs(x) <= std::numeric_limits<float>::max(),
                  fmt::format("a scalar argument's value {:g} is past the range of f32 (it would be inf)", x));
    pack.add(static_cast<float>(x));
  }
  else if (a.type == "f64") pack.add(a.value->eval(v));
  else if (a.type == "i32") pack.add(static_cast<std::int32_t>(whole(Limits32::min(), Limits32::max())));
  else if (a.type == "u32") pack.add(static_cast<std::uint32_t>(whole(0, std::numeric_limits<std::uint32_t>::max())));
  else if (a.type == "i64") pack.add(static_cast<std::int64_t>(whole(std::numeric_limits<long long>::min(), kMax)));
  else pack.add(static_cast<std::uint64_t>(whole(0, kMax)));
}

/// The text of define `macro`'s value at `v`: a whole number in full, else its digits; a value that is no finite
/// number (a `/` by zero) is no config's, as a C compiler would read `inf` as a name.
std::string define_value(const std::string& macro, const Expression& e, const Values& v) {
  const double x = e.eval(v);
  KTUNE_REQUIRE(std::isfinite(x), fmt::format("define {} '{}' = {:g} is not a finite number (a division by zero?)",
                                              macro, e.text(), x));
  return x == std::floor(x) && std::abs(x) < 9e15 ? std::to_string(static_cast<long long>(x))
                                                  : fmt::format("{:.17g}", x);
}

/// The spec's text as far as it makes the kernels, their launches and their checks: its JSON without the words
/// for people (summary, a tunable's about), the run-time parameters' values (each launch gives its own), and what
/// only chooses what to measure first or how to report it (problem, problems, default, candidates, flops, bytes;
/// an entry is keyed by its problem), laid out one way, so such edits keep the spec's tuned entries.
std::string code_text(const std::string& text) {
  // Keys sorted (nlohmann::json's map): an object's keys in another order say the same spec.
  auto j = nlohmann::json::parse(text);  // read before, by load_spec
  for (const char* field : {"summary", "problem", "problems", "default", "candidates", "flops", "bytes"})
    j.erase(field);
  if (j.contains("tunables"))
    for (auto& [name, t] : j["tunables"].items())
      if (t.is_object()) t.erase("about");
  if (j.contains("parameters"))
    for (auto& [name, value] : j["parameters"].items()) value = nullptr;
  return j.dump();
}

/// `text` with its comments and #line markers blanked, the rest kept (by hand: std::regex recurses per
/// character, and a long comment would overflow its stack).
std::string without_comments_and_line_markers(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const bool line_start = i == 0 || text[i - 1] == '\n';
    std::size_t end = i;
    if (text.compare(i, 2, "//") == 0 || (line_start && text.compare(i, 6, "#line ") == 0))
      end = std::min(text.find('\n', i), text.size());
    else if (text.compare(i, 2, "/*") == 0)
      end = std::min(text.find("*/", i + 2), text.size() - 2) + 2;
    if (end == i) {
      out += text[i++];
      continue;
    }
    out += ' ';
    i = end;
  }
  return out;
}

}  // namespace

SpecFamily::SpecFamily(std::shared_ptr<const KernelSpec> spec) : spec_(std::move(spec)) {
  KTUNE_REQUIRE(templates::family_named(spec_->name) == nullptr,
                fmt::format("{}: name '{}' is a built-in family's; choose another", spec_->path.string(), spec_->name));
  source_ = expand_source(*spec_);
  // A kernel name the sources never declare fails every variant in NVRTC's name map: said once, here. Looked
  // for in the code: not in comments, nor in the #line markers that name the files (a kernel named as its file).
  const std::string code = without_comments_and_line_markers(source_.text);
  const auto require_declared = [&](const std::string& expression, const char* field) {
    std::string base = expression.substr(0, expression.find('<'));
    base.erase(base.find_last_not_of(" \t") + 1);
    if (const auto colons = base.rfind("::"); colons != std::string::npos) base = base.substr(colons + 2);
    if (!is_identifier(base)) return;  // NVRTC says what it makes of it
    std::vector<std::string> files;
    for (const auto& f : spec_->sources) files.push_back(f.filename().string());
    KTUNE_REQUIRE(std::regex_search(code, std::regex("\\b" + base + "\\b")),
                  fmt::format("{}: {} '{}': no '{}' in its sources ({})", spec_->path.string(), field, expression, base,
                              fmt::join(files, ", ")));
  };
  require_declared(spec_->kernel, "kernel");
  // A define the source writes again outside any #if takes the source's value; one under #ifndef (a default),
  // or any other condition, may be the source's choice.
  {
    const std::regex opens("[ \\t]*#[ \\t]*if(n?def)?\\b.*"), closes("[ \\t]*#[ \\t]*endif\\b.*");
    const std::regex defines("[ \\t]*#[ \\t]*define[ \\t]+([A-Za-z_][A-Za-z0-9_]*).*");
    std::istringstream lines(code);
    int depth = 0;
    for (std::string line; std::getline(lines, line);) {
      std::smatch m;
      if (std::regex_match(line, opens)) ++depth;
      else if (std::regex_match(line, closes)) depth = std::max(depth - 1, 0);
      else if (depth == 0 && std::regex_match(line, m, defines))
        for (const auto& [macro, e] : spec_->defines)
          if (macro == m[1].str())
            throw_error(ErrorKind::kInvalidInput,
                        fmt::format("{}: define '{}': the source defines it again ('{}'), and that value is the "
                                    "one compiled; put the source's under #ifndef {}, or drop it",
                                    spec_->path.string(), macro, line, macro));
    }
  }
  for (const auto& b : spec_->buffers)  // the copy would fail every variant's launch
    KTUNE_REQUIRE(b.constant.empty() || std::regex_search(code, std::regex("__constant__[^;{}()]*\\b" + b.constant +
                                                                           "\\b")),
                  fmt::format("{}: buffer '{}': no __constant__ '{}' in its sources", spec_->path.string(), b.name,
                              b.constant));
  // A __constant__ variable with no initializer that no buffer fills holds zeros in every launch: a spec has no
  // host code to fill it (Kernel Tuner's cmem_args are a buffer's "constant" here).
  const std::regex constant_variable(
      "__constant__[^;={}()]*?([A-Za-z_][A-Za-z0-9_]*)[ \\t]*(\\[[^\\]]*\\][ \\t]*)*;");
  for (auto it = std::sregex_iterator(code.begin(), code.end(), constant_variable); it != std::sregex_iterator();
       ++it) {
    const std::string name = (*it)[1].str();
    const auto at = static_cast<std::size_t>(it->position());
    if (at >= 7 && code.compare(at - 7, 7, "extern ") == 0) continue;  // defined in another source
    KTUNE_REQUIRE(std::any_of(spec_->buffers.begin(), spec_->buffers.end(),
                              [&](const BufferSpec& b) { return b.constant == name; }),
                  fmt::format("{}: __constant__ '{}' has no initializer and no buffer fills it, so every launch would "
                              "read zeros; give an input buffer \"constant\": \"{}\"",
                              spec_->path.string(), name, name));
  }
  if (spec_->reference.kind == ReferenceSpec::Kind::kKernel)
    require_declared(spec_->reference.kernel, "reference kernel");
  Hasher h;
  h.add("kernel spec").add(code_text(spec_->text)).add(source_.text);
  for (const auto& b : spec_->buffers)  // inputs and answers read from files are part of what was tuned
    if (b.init == Init::kFile) h.add(read_file(b.file));
  for (const auto& [buffer, file] : spec_->reference.files) h.add(buffer).add(read_file(file));
  hash_ = h.hex();
}

void SpecFamily::require_emulation() const {
  KTUNE_REQUIRE(emulation_gaps().empty(),
                fmt::format("{}: the emulation cannot run this kernel: {}{}; run it with --backend gpu",
                            spec_->path.string(), emulation_gaps().front(),
                            emulation_gaps().size() > 1 ? fmt::format(" (and {} more)", emulation_gaps().size() - 1)
                                                        : std::string()));
}

std::vector<std::string> SpecFamily::source_files() const {
  std::vector<std::string> files;
  for (const auto& s : spec_->sources) files.push_back(s.string());
  return files;
}

void SpecFamily::check_problem(const Problem& p) const {
  KTUNE_REQUIRE(std::find(spec_->dtypes.begin(), spec_->dtypes.end(), p.dtype) != spec_->dtypes.end(),
                fmt::format("{}: dtype '{}' is not supported; accepted: {}", name(), p.dtype,
                            fmt::join(spec_->dtypes, ", ")));
  std::vector<std::string> given;
  for (const auto& [k, v] : p.dims) {
    given.push_back(k);
    KTUNE_REQUIRE(v >= 1 && v <= kMaxElements,
                  fmt::format("{}: dimension '{}' = {} must be in 1..2^36", name(), k, v));
  }
  KTUNE_REQUIRE(given == spec_->dims, fmt::format("{}: the problem's dimensions are {}, got {}", name(),
                                                  fmt::join(spec_->dims, ", "), fmt::join(given, ", ")));
}

Values SpecFamily::values(const Config& config, const Problem& problem) const {
  Values v;
  for (const auto& [k, x] : problem.dims) v[k] = static_cast<double>(x);
  for (const auto& p : spec_->space.params()) v[p.name] = static_cast<double>(config.at(p.name));
  for (const auto& [name, value] : spec_->parameters) v[name] = value;
  return v;
}

Config SpecFamily::default_config(const Problem& problem) const {
  // The spec's default where it is valid for this problem, else the first valid point.
  const DeviceLimits device = DeviceLimits::for_arch(kDefaultArch);
  if (spec_->default_config && is_valid(*spec_->default_config, problem, device)) return *spec_->default_config;
  for (std::uint64_t i = 0; i < spec_->space.size(); ++i)
    if (is_valid(spec_->space.at(i), problem, device)) return spec_->space.at(i);
  return spec_->default_config.value_or(spec_->space.at(0));  // none is valid: the one to say why of
}

const std::optional<Config>& SpecFamily::declared_default() const { return spec_->default_config; }

bool SpecFamily::is_valid(const Config& config, const Problem& problem, const DeviceLimits& device,
                          std::string* why) const {
  auto reject = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  try {
    const Values v = values(config, problem);
    for (const auto& r : spec_->restrictions) {
      const double x = r->eval(v);
      if (!(x != 0) || std::isnan(x)) return reject(fmt::format("restriction '{}' does not hold", r->text()));
    }
    long long threads = 1;
    for (std::size_t i = 0; i < spec_->block.size(); ++i)
      threads *= spec_->block[i]->eval_integer(
          v, 1, std::min<long long>(kMaxBlockDims[i], device.max_threads_per_block),
          kMaxBlockDims[i] < device.max_threads_per_block ? fmt::format("CUDA's limit on blockDim.{}", kAxes[i])
                                                          : std::string());
    if (threads > device.max_threads_per_block)
      return reject(fmt::format("{} threads per block, more than the device's {}", threads,
                                device.max_threads_per_block));
    for (std::size_t i = 0; i < spec_->grid.size(); ++i)
      spec_->grid[i]->eval_integer(v, 1, kMaxGridDims[i], fmt::format("CUDA's limit on gridDim.{}", kAxes[i]));
    substitute(spec_->kernel, spec_->kernel_parts, v, problem.dtype);  // its template arguments whole numbers
    if (spec_->shared_bytes) spec_->shared_bytes->eval_integer(v, 0, device.max_smem_per_block);
    // The defines and scalar arguments as the render and the launch take them (a division by zero, a count of 1.5
    // blocks for an i32): said here, so the config is pruned, not a session ended.
    for (const auto& [macro, e] : spec_->defines)
      if (e) define_value(macro, *e, v);
    templates::ArgPack scalars;
    for (const auto& a : spec_->args)
      if (a.value) add_scalar(scalars, a, v);
  } catch (const Error& e) {
    return reject(e.what());
  }
  return true;
}

std::string SpecFamily::source_with_defines(const Values& v, const std::string& dtype, const Geometry& grid,
                                            const Geometry& block) const {
  std::string text;
  if (spec_->kernel_tuner_macros) {
    // As Kernel Tuner's prepare_kernel_string writes them: a kernel's `#ifndef kernel_tuner` defaults stand aside,
    // and the launch's geometry is there by Kernel Tuner's names.
    text += "#define kernel_tuner 1\n";
    const auto defined = [&](const std::string& name) {
      return std::any_of(spec_->defines.begin(), spec_->defines.end(), [&](const auto& d) { return d.first == name; });
    };
    for (std::size_t i = 0; i < 3; ++i)
      for (const auto& [prefix, geometry, most] : {std::tuple{"grid_size_", &grid, kMaxGridDims[i]},
                                                   std::tuple{"block_size_", &block, kMaxBlockDims[i]}}) {
        const std::string name = prefix + std::string(kAxes[i]);
        if (defined(name)) continue;
        const long long n = i < geometry->size() ? (*geometry)[i]->eval_integer(v, 1, most) : 1;
        text += fmt::format("#define {} {}\n", name, n);
      }
  }
  for (const auto& [macro, e] : spec_->defines) {
    if (!e) {
      text += fmt::format("#define {} {}\n", macro, c_type(dtype));
      continue;
    }
    text += fmt::format("#define {} {}\n", macro, define_value(macro, *e, v));
  }
  return text + source_.text;
}

templates::Rendered SpecFamily::render(const Config& config, const Problem& problem) const {
  check_problem(problem);
  spec_->space.check_member(config);
  const Values v = values(config, problem);
  return templates::render_text(source_with_defines(v, problem.dtype, spec_->grid, spec_->block),
                                {substitute(spec_->kernel, spec_->kernel_parts, v, problem.dtype)}, name(),
                                "kernel spec " + spec_->path.filename().string());
}

Launch SpecFamily::launch(const std::vector<std::unique_ptr<Expression>>& grid,
                          const std::vector<std::unique_ptr<Expression>>& block, const Values& v,
                          const std::vector<std::uint64_t>& addresses, const Problem& problem) const {
  Launch l;
  for (std::size_t i = 0; i < grid.size(); ++i)
    l.grid[i] = static_cast<unsigned>(
        grid[i]->eval_integer(v, 1, kMaxGridDims[i], fmt::format("CUDA's limit on gridDim.{}", kAxes[i])));
  for (std::size_t i = 0; i < block.size(); ++i)
    l.block[i] = static_cast<unsigned>(
        block[i]->eval_integer(v, 1, kMaxBlockDims[i], fmt::format("CUDA's limit on blockDim.{}", kAxes[i])));
  if (spec_->shared_bytes) l.dynamic_smem = static_cast<unsigned>(spec_->shared_bytes->eval_integer(v, 0, 1 << 30));
  if (addresses.size() != spec_->buffers.size()) {
    std::vector<std::string> names;
    for (const auto& b : spec_->buffers) names.push_back(b.name);
    throw_error(ErrorKind::kInvalidInput, fmt::format("{}: {} buffer addresses given, the spec has {} ({})", name(),
                                                      addresses.size(), spec_->buffers.size(),
                                                      fmt::join(names, ", ")));
  }
  for (const auto& a : spec_->args) {
    if (!a.buffer.empty()) {
      for (std::size_t i = 0; i < spec_->buffers.size(); ++i)
        if (spec_->buffers[i].name == a.buffer) l.args.add(addresses[i]);
    } else {
      add_scalar(l.args, a, v);
    }
  }
  std::vector<templates::BufferShape> shapes;
  for (std::size_t i = 0; i < spec_->buffers.size(); ++i)
    if (const BufferSpec& b = spec_->buffers[i]; !b.constant.empty()) {
      if (shapes.empty()) shapes = buffer_shapes(problem);
      l.constants.push_back({b.constant, addresses[i], shapes[i].bytes,
                             fmt::format("buffer '{}' of {}", b.name, spec_->path.filename().string())});
    }
  return l;
}

std::vector<Launch> SpecFamily::plan(const Config& config, const Problem& problem,
                                     const std::vector<std::uint64_t>& addresses, const DeviceLimits& device) const {
  return plan(config, problem, addresses, device, {});
}

std::vector<Launch> SpecFamily::plan(const Config& config, const Problem& problem,
                                     const std::vector<std::uint64_t>& addresses, const DeviceLimits&,
                                     const templates::Scalars& parameters) const {
  check_problem(problem);
  Values v = values(config, problem);
  for (const auto& [given, value] : resolve_scalars(problem, parameters)) v[given] = value;
  std::vector<Launch> launches;
  launches.push_back(launch(spec_->grid, spec_->block, v, addresses, problem));
  return launches;
}

std::vector<templates::BufferShape> SpecFamily::buffer_shapes(const Problem& problem) const {
  check_problem(problem);
  Values dims;
  for (const auto& [k, x] : problem.dims) dims[k] = static_cast<double>(x);
  std::vector<templates::BufferShape> shapes;
  for (const auto& b : spec_->buffers) {
    const templates::DType dtype = b.dtype_from_problem ? templates::parse_dtype(problem.dtype) : b.dtype;
    templates::BufferShape shape{b.name, b.role, dtype};
    try {
      shape.bytes = static_cast<std::size_t>(b.count->eval_integer(dims, 1, kMaxElements)) *
                    templates::size_of(shape.dtype);
    } catch (const Error& e) {  // named as the spec's load-time errors are: by its file
      if (e.kind() != ErrorKind::kInvalidInput) throw;
      throw_error(ErrorKind::kInvalidInput, fmt::format("{}: {} (for {})", spec_->path.string(), e.what(),
                                                        problem.key()));
    }
    shapes.push_back(std::move(shape));
  }
  return shapes;
}

templates::Workload SpecFamily::make_workload(const Problem& problem, std::uint64_t seed) const {
  return make_workload(problem, seed, {});
}

templates::Workload SpecFamily::make_workload(const Problem& problem, std::uint64_t seed,
                                              const templates::Scalars& parameters) const {
  require_checkable(problem, parameters);
  const templates::Scalars values = resolve_scalars(problem, parameters);
  const std::vector<templates::BufferShape> shapes = buffer_shapes(problem);
  std::mt19937_64 rng(seed);
  templates::Workload w;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const auto& b = spec_->buffers[i];
    HostBuffer h;
    h.name = b.name;
    h.role = b.role;
    h.dtype = shapes[i].dtype;
    h.tolerance = b.tolerance       ? *b.tolerance
                  : spec_->tolerance ? *spec_->tolerance
                                     : default_tolerance(problem.dtype, h.dtype);
    h.atol = b.atol.value_or(spec_->atol.value_or(0.0));
    const std::size_t n = shapes[i].bytes / templates::size_of(h.dtype);
    if (b.role == Role::kOutput || b.init == Init::kZeros) {
      h.bytes.assign(n * templates::size_of(h.dtype), std::byte{0});
    } else if (b.init == Init::kRandom) {
      h.bytes = random_bytes(h.dtype, n, rng);
    } else {
      ArrayFile a = read_array_file(b.file, b.name);
      KTUNE_REQUIRE(a.dtype == h.dtype && a.bytes.size() == n * templates::size_of(h.dtype),
                    fmt::format("{}: buffer '{}' is {} {} values, but {} holds {} bytes of {}", origin(), b.name, n,
                                templates::to_string(h.dtype), b.file.string(), a.bytes.size(),
                                templates::to_string(a.dtype)));
      h.bytes = std::move(a.bytes);
    }
    w.buffers.push_back(std::move(h));
  }
  if (spec_->reference.kind == ReferenceSpec::Kind::kFiles) {
    for (std::size_t i = 0; i < w.buffers.size(); ++i) {
      HostBuffer& h = w.buffers[i];
      if (!checked(spec_->buffers[i])) continue;
      const auto& path = spec_->reference.files.at(h.name);
      ArrayFile a = read_array_file(path, h.name);
      KTUNE_REQUIRE(a.dtype == h.dtype && a.bytes.size() == h.bytes.size(),
                    fmt::format("{}: answer {} holds {} bytes of {}, buffer '{}' is {} bytes of {}", origin(),
                                path.string(), a.bytes.size(), templates::to_string(a.dtype), h.name, h.bytes.size(),
                                templates::to_string(h.dtype)));
      h.expected = std::move(a.bytes);
    }
  } else {
    run_reference(problem, w, values);
  }
  return w;
}

void SpecFamily::require_checkable(const Problem& problem, const templates::Scalars& parameters) const {
  KTUNE_REQUIRE(resolve_scalars(problem, parameters) == spec_->parameters ||
                    spec_->reference.kind != ReferenceSpec::Kind::kFiles,
                fmt::format("{}: its answers come from files, computed at the spec's parameter values; other values "
                            "cannot be checked",
                            origin()));
}

void SpecFamily::run_reference(const Problem& problem, templates::Workload& w,
                               const templates::Scalars& parameters) const {
  const ReferenceSpec& ref = spec_->reference;
  require_emulation();
  const Config config = ref.config ? *ref.config : default_config(problem);
  Values v = values(config, problem);
  for (const auto& [name, value] : parameters) v[name] = value;
  // The kernel that runs, alone: the tuned kernel's name need not be one at the reference's config.
  const std::string kernel = ref.kind == ReferenceSpec::Kind::kKernel
                                 ? substitute(ref.kernel, ref.kernel_parts, v, problem.dtype)
                                 : substitute(spec_->kernel, spec_->kernel_parts, v, problem.dtype);
  // The reference's own launch, where it has one, in its macros and its plan.
  const Geometry& grid = ref.grid.empty() ? spec_->grid : ref.grid;
  const Geometry& block = ref.block.empty() ? spec_->block : ref.block;
  const auto rendered = templates::render_text(source_with_defines(v, problem.dtype, grid, block), {kernel}, name(),
                                               "kernel spec " + spec_->path.filename().string());
  auto backend = tuner::exec::make_emu_backend();
  std::vector<std::unique_ptr<tuner::exec::Buffer>> buffers;
  std::vector<std::uint64_t> addresses;
  for (const auto& b : w.buffers) {
    buffers.push_back(backend->allocate(b.bytes.size(), b.name));
    addresses.push_back(buffers.back()->address());
  }
  std::vector<Launch> plan;
  plan.push_back(launch(grid, block, v, addresses, problem));
  std::shared_ptr<const tuner::exec::Module> module;
  // One run from the inputs as uploaded, the outputs all bits set (`poisoned`) or zeros; the checked buffers after.
  const auto run = [&](bool poisoned) {
    for (std::size_t i = 0; i < w.buffers.size(); ++i) {
      const auto& b = w.buffers[i];
      if (b.role != Role::kOutput)
        backend->upload(*buffers[i], b.bytes.data(), b.bytes.size());
      else if (poisoned)  // as the tuned kernel's: an element the reference never writes is no answer
        backend->poison(*buffers[i]);
      else
        backend->upload(*buffers[i], std::vector<std::byte>(b.bytes.size()).data(), b.bytes.size());
    }
    try {
      if (!module) module = backend->load(rendered);
      backend->launch(*module, plan);
      backend->synchronize();
    } catch (const Error& e) {
      // The spec's own reference: with it failing (an emulation fault, a failed launch), no variant can be
      // checked, and a session would fail every one. The machine's faults (I/O, a compiler) stay what they are.
      if (e.kind() != ErrorKind::kCheckFailed && e.kind() != ErrorKind::kCuda) throw;
      throw_error(ErrorKind::kInvalidInput,
                  fmt::format("{}: the reference {} at {} failed, so no variant can be checked against it: {}",
                              origin(), kernel, config.str(), e.what()));
    }
    std::vector<std::vector<std::byte>> out(w.buffers.size());
    for (std::size_t i = 0; i < w.buffers.size(); ++i)
      if (checked(spec_->buffers[i])) {
        out[i].resize(w.buffers[i].bytes.size());
        backend->download(out[i].data(), *buffers[i], out[i].size());
      }
    return out;
  };
  std::vector<std::vector<std::byte>> answers = run(true);
  // Poison is NaN in a float type alone: an integer that held it may be an answer (-1, 255). So an integer output
  // runs again from zeros, and an element that differs between the two runs was never written.
  const bool exact = std::any_of(w.buffers.begin(), w.buffers.end(), [](const HostBuffer& b) {
    return b.role == Role::kOutput && templates::is_integer(b.dtype);
  });
  const std::vector<std::vector<std::byte>> again = exact ? run(false) : std::vector<std::vector<std::byte>>();
  for (std::size_t i = 0; i < w.buffers.size(); ++i) {
    auto& b = w.buffers[i];
    if (!checked(spec_->buffers[i])) continue;
    b.expected = std::move(answers[i]);
    KTUNE_REQUIRE(std::isfinite(templates::relative_l2(b.dtype, b.expected, b.expected)),
                  fmt::format("{}: the reference {} left NaN or Inf in buffer '{}' (an output starts poisoned, "
                              "NaN in a float type: is every element written? its grid and block?)",
                              origin(), kernel, b.name));
    if (b.role != Role::kOutput || !templates::is_integer(b.dtype)) continue;
    const std::size_t size = templates::size_of(b.dtype), n = b.expected.size() / size;
    std::size_t unwritten = 0, first = 0;
    for (std::size_t k = n; k-- > 0;)
      if (std::memcmp(b.expected.data() + k * size, again[i].data() + k * size, size) != 0) {
        ++unwritten;
        first = k;
      }
    KTUNE_REQUIRE(unwritten == 0,
                  fmt::format("{}: the reference {} left {} of {} elements of buffer '{}' unwritten, the first at "
                              "index {} (an output starts poisoned, all bits set, and they kept what each run started "
                              "them with: is every element written? its grid and block?)",
                              origin(), kernel, unwritten, n, b.name, first));
  }
}

bool SpecFamily::timing_restores_inouts() const { return spec_->restore_inouts; }

double SpecFamily::flops(const Problem& problem) const {
  Values dims;
  for (const auto& [k, x] : problem.dims) dims[k] = static_cast<double>(x);
  return spec_->flops ? spec_->flops->eval(dims) : 0.0;
}

double SpecFamily::bytes(const Problem& problem) const {
  Values dims;
  for (const auto& [k, x] : problem.dims) dims[k] = static_cast<double>(x);
  if (spec_->bytes) return spec_->bytes->eval(dims);
  double total = 0;
  for (const auto& b : spec_->buffers) {
    const DType t = b.dtype_from_problem ? templates::parse_dtype(problem.dtype) : b.dtype;
    const double one = b.count->eval(dims) * static_cast<double>(templates::size_of(t));
    total += b.role == Role::kInOut ? 2 * one : one;
  }
  return total;
}

const SpecFamily& load_spec_family(const std::filesystem::path& path) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<SpecFamily>> loaded;
  auto family = std::make_unique<SpecFamily>(load_spec(path));
  std::lock_guard lock(mutex);
  loaded.push_back(std::move(family));
  return *loaded.back();
}

}  // namespace ktune::spec
