// A spec's sources made self-contained (quoted includes expanded), the
// constructs the emulation lacks, name-expression substitution, and the
// array files (.npy, .safetensors) that hold inputs and answers.
#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "base/error.hpp"
#include "base/files.hpp"
#include "base/safetensors.hpp"
#include "spec/spec.hpp"
#include "templates/embedded.hpp"

namespace ktune::spec {
namespace {

namespace fs = std::filesystem;

struct Gap {
  std::regex pattern;
  const char* what;
};

const std::vector<Gap>& gaps() {
  static const std::vector<Gap> g = {
    // Attributes may come between (`extern __align__(16) __shared__ float s[];`).
    {std::regex(R"(\bextern\s+((__align__|alignas|__attribute__)\s*\(+[^;]*?\)+\s*)*__shared__)"),
     "extern __shared__ (dynamic shared memory: use kt::dynamic_shared<T>() from \"kt.cuh\", which both backends "
     "provide)"},
    {std::regex(R"(\b(asm|__asm__|__asm)\s*((volatile|__volatile__|__volatile)\s*)?\()"),
     "inline PTX (asm): the host compiler cannot run it"},
    {std::regex(R"(^\s*#\s*include\s*<(cuda|cooperative_groups|mma|crt/|sm_))"),
     "a CUDA header include (the emulation provides the CUDA names itself: put it under #ifndef KT_EMULATION)"},
    {std::regex(R"(\bcooperative_groups\b|\bcg::)"), "cooperative groups"},
    {std::regex(R"(\bwmma::)"), "wmma fragments (use kt::mma_* from \"kt.cuh\")"},
    {std::regex(R"(\b(tex1Dfetch|tex1D|tex2D|tex3D|surf2Dread|surf2Dwrite)\s*[<(])"), "textures and surfaces"},
    {std::regex(R"(\b(erfinvf?|erfcinvf?|normcdfinvf?)\s*\()"),
     "the inverse error functions (erfinvf, erfcinvf, normcdfinvf): the host's math library has none"},
    // CUDA names the host half does not define: refused by name, not left to the host compiler's error.
    {std::regex(R"(\b(__[fd](add|sub|mul|div|rcp|sqrt|rsqrt)_r[zdu]|__fmaf?_r[zdu])"
                R"(|__(float|double)2(half|bfloat16)_r[zdu]|__u?(int|ll)2(float|double)_r[zdu]|__double2float_r[zdu])"
                R"(|__float2half2_rn|__bfloat162bfloat162)"
                R"(|h2?(exp|exp2|exp10|log|log2|log10|sin|cos|sqrt|rsqrt|rcp|ceil|floor|trunc|rint)|__v[a-z0-9]+[24])"
                R"(|__dp[24]a(_lo|_hi)?|__globaltimer|__lanemask_(lt|le|eq|ge|gt)|__is(Shared|Global|Constant|Local))"
                R"(|__cvta_\w+|normcdff?|erfcxf?|fdividef)\s*\()"),
     "{} (the emulation does not provide it)"},
    {std::regex(R"(\b__activemask\s*\()"),
     "__activemask() (the emulation does not track which lanes a branch left: pass the mask you mean to the "
     "*_sync collectives)"},
  };
  return g;
}

class Expander {
 public:
  explicit Expander(const KernelSpec& spec) : spec_(spec) {}

  void file(const fs::path& path) {
    std::error_code ec;
    const fs::path canonical = fs::weakly_canonical(path, ec);
    if (!seen_.insert(canonical.string()).second) return;
    std::istringstream in(read_file(path));
    out_.text += fmt::format("#line 1 \"{}\"\n", path.filename().string());
    int line_no = 0;
    int depth = 0, gpu_only_depth = 0;  // #if nesting; the depth of an open `#ifndef KT_EMULATION`
    static const std::regex include(R"(^\s*#\s*include\s*"([^"]+)\")");
    static const std::regex gpu_only(R"(^\s*#\s*(ifndef\s+KT_EMULATION|if\s+!\s*defined\s*\(?\s*KT_EMULATION))");
    static const std::regex open_if(R"(^\s*#\s*if)"), else_(R"(^\s*#\s*(else|elif))"), endif(R"(^\s*#\s*endif)");
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (std::regex_search(line, open_if)) {
        ++depth;
        if (gpu_only_depth == 0 && std::regex_search(line, gpu_only)) gpu_only_depth = depth;
      } else if (std::regex_search(line, else_) && gpu_only_depth == depth) {
        gpu_only_depth = 0;
      } else if (std::regex_search(line, endif)) {
        if (gpu_only_depth == depth) gpu_only_depth = 0;
        --depth;
      }
      std::smatch m;
      // One under `#ifndef KT_EMULATION` that none of ours holds is the GPU compiler's to find ("cuda_fp16.h"), as
      // an include of <...> is: kept as written.
      if (std::regex_search(line, m, include) && include_file(m[1].str(), path, line_no, gpu_only_depth > 0)) {
        out_.text += fmt::format("#line {} \"{}\"\n", line_no + 1, path.filename().string());
        continue;
      }
      if (gpu_only_depth == 0)
        for (const auto& g : gaps())
          if (std::smatch found; std::regex_search(line, found, g.pattern)) {
            std::string what = g.what;  // "{}": the name found
            if (const std::size_t at = what.find("{}"); at != std::string::npos) what.replace(at, 2, found[1].str());
            out_.emulation_gaps.push_back(fmt::format("{}:{}: {}", path.filename().string(), line_no, what));
          }
      out_.text += line + "\n";
    }
  }

  ExpandedSource take() { return std::move(out_); }

 private:
  /// Expands include `name` of `from`; false where none is found and the include is `gpu_only`.
  bool include_file(const std::string& name, const fs::path& from, int line_no, bool gpu_only) {
    std::error_code ec;
    std::vector<fs::path> tried = {from.parent_path() / name};
    for (const auto& d : spec_.include_dirs) tried.push_back(d / name);
    for (const auto& p : tried)
      if (fs::is_regular_file(p, ec)) {
        file(p);
        return true;
      }
    // ktune's device headers: "kt.cuh" (or "common/kt.cuh") brings the kt:: API of the templates.
    for (const std::string& embedded : {name, "common/" + name})
      if (templates::embedded_files().count(embedded)) {
        if (seen_.insert("embedded:" + embedded).second) out_.text += templates::expand_includes(embedded) + "\n";
        return true;
      }
    if (gpu_only) return false;
    std::string looked;
    for (const auto& p : tried) looked += (looked.empty() ? "" : ", ") + p.string();
    throw_error(ErrorKind::kInvalidInput, fmt::format("{}:{}: #include \"{}\" not found (looked at {})",
                                                      from.string(), line_no, name, looked));
  }

  const KernelSpec& spec_;
  ExpandedSource out_;
  std::set<std::string> seen_;
};

templates::DType npy_dtype(const std::string& descr, const fs::path& path) {
  static const std::map<std::string, templates::DType> types = {
    {"<f4", templates::DType::kF32}, {"<f2", templates::DType::kF16}, {"<i4", templates::DType::kI32},
    {"<i8", templates::DType::kI64}, {"|u1", templates::DType::kU8},  {"<u2", templates::DType::kBF16}};
  const auto it = types.find(descr);
  KTUNE_REQUIRE(it != types.end(), fmt::format("{}: dtype '{}' is not one of <f4, <f2, <i4, <i8, |u1 (and <u2 read as "
                                               "bf16 bits)",
                                               path.string(), descr));
  return it->second;
}

ArrayFile read_npy(const fs::path& path, const std::string& bytes) {
  KTUNE_REQUIRE(bytes.size() >= 10 && bytes.compare(0, 6, "\x93NUMPY") == 0,
                path.string() + ": not a .npy file (no \\x93NUMPY magic)");
  const unsigned major = static_cast<unsigned char>(bytes[6]);
  std::size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
    start = 10;
  } else {
    KTUNE_REQUIRE(bytes.size() >= 12, path.string() + ": truncated .npy header");
    for (int i = 0; i < 4; ++i)
      header_len |= static_cast<std::size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    start = 12;
  }
  KTUNE_REQUIRE(start + header_len <= bytes.size(), path.string() + ": truncated .npy header");
  const std::string header = bytes.substr(start, header_len);
  std::smatch descr, order;
  KTUNE_REQUIRE(std::regex_search(header, descr, std::regex(R"('descr'\s*:\s*'([^']+)')")),
                path.string() + ": .npy header has no 'descr'");
  KTUNE_REQUIRE(!std::regex_search(header, order, std::regex(R"('fortran_order'\s*:\s*True)")),
                path.string() + ": Fortran-order arrays are not read; save a C-order array");
  ArrayFile a{npy_dtype(descr[1].str(), path), {}};
  const char* data = bytes.data() + start + header_len;
  a.bytes.resize(bytes.size() - start - header_len);
  std::memcpy(a.bytes.data(), data, a.bytes.size());
  return a;
}

ArrayFile read_safetensors(const fs::path& path, const std::string& name) {
  const SafetensorsReader file(path);
  const std::string chosen = !file.contains(name) && file.order().size() == 1 ? file.order().front() : name;
  KTUNE_REQUIRE(file.contains(chosen),
                fmt::format("{}: no tensor '{}' (and not exactly one tensor)", path.string(), name));
  static const std::map<std::string, templates::DType> types = {
    {"F32", templates::DType::kF32}, {"BF16", templates::DType::kBF16}, {"F16", templates::DType::kF16},
    {"I32", templates::DType::kI32}, {"I64", templates::DType::kI64},   {"U8", templates::DType::kU8}};
  const SafeTensor t = file.read(chosen);
  KTUNE_REQUIRE(types.count(t.dtype), fmt::format("{}: dtype '{}' is not one of F32, BF16, F16, I32, I64, U8",
                                                  path.string(), t.dtype));
  ArrayFile a{types.at(t.dtype), std::vector<std::byte>(t.bytes.size())};
  std::memcpy(a.bytes.data(), t.bytes.data(), a.bytes.size());
  return a;
}

}  // namespace

ExpandedSource expand_source(const KernelSpec& spec) {
  Expander e(spec);
  for (const auto& s : spec.sources) e.file(s);
  return e.take();
}

std::string c_type(const std::string& dtype) {
  static const std::map<std::string, std::string> types = {{"f32", "float"}, {"bf16", "__nv_bfloat16"},
                                                            {"f16", "__half"}, {"i32", "int"},
                                                            {"i64", "long long"}, {"u8", "unsigned char"}};
  const auto it = types.find(dtype);
  KTUNE_REQUIRE(it != types.end(), fmt::format("dtype '{}' has no C++ element type here", dtype));
  return it->second;
}

std::string substitute(const std::string& text, const std::vector<std::unique_ptr<Expression>>& parts,
                       const Values& values, const std::string& dtype) {
  std::string out;
  std::size_t pos = 0;
  for (const auto& part : parts) {
    const std::size_t open = text.find('{', pos), close = text.find('}', open);
    out += text.substr(pos, open - pos);
    pos = close + 1;
    if (!part) {
      out += c_type(dtype);
      continue;
    }
    // A template argument is a whole number (a config where it is not is no valid one: SpecFamily::is_valid).
    out += std::to_string(part->eval_integer(values, std::numeric_limits<long long>::min(),
                                             std::numeric_limits<long long>::max()));
  }
  return out + text.substr(pos);
}

ArrayFile read_array_file(const fs::path& path, const std::string& name) {
  std::error_code ec;
  KTUNE_REQUIRE(fs::is_regular_file(path, ec), path.string() + ": no such file");
  if (path.extension() == ".npy") return read_npy(path, read_file(path));
  if (path.extension() == ".safetensors") return read_safetensors(path, name);
  throw_error(ErrorKind::kInvalidInput, path.string() + ": an array file is .npy or .safetensors");
}

}  // namespace ktune::spec
