// Reading a kernel spec: every field checked, every expression parsed against
// the names it may use, one line per problem.
#include "spec/spec.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>
#include <set>

#include "base/error.hpp"
#include "base/files.hpp"
#include "base/json_input.hpp"

namespace ktune::spec {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using templates::DType;
using templates::Role;

/// The fault of a name that expressions read as Python's operator or constant.
std::string reserved(const std::string& what, const std::string& name) {
  return fmt::format("{} '{}' is a word of the expressions (Python's {}, as restrictions are written); name it "
                     "otherwise",
                     what, name, name);
}

/// Reads one spec; `where_` prefixes every message with the file's name.
class Reader {
 public:
  explicit Reader(const fs::path& path) : where_(path.string()) {}

  std::vector<std::string> parameters;  ///< the spec's run-time parameters, once read

  [[noreturn]] void fail(const std::string& message) const {
    throw_error(ErrorKind::kInvalidInput, where_ + ": " + message);
  }
  void require(bool cond, const std::string& message) const {
    if (!cond) fail(message);
  }

  /// Fails on a field of `object` not in `known` (a typo would otherwise be ignored).
  void known_fields(const json& object, const std::string& what, std::initializer_list<const char*> known) const {
    for (const auto& [k, v] : object.items()) {
      bool found = false;
      for (const char* name : known) found = found || k == name;
      if (!found) fail(fmt::format("{}: unknown field '{}'; accepted: {}", what, k, fmt::join(known, ", ")));
    }
  }

  std::string string_at(const json& object, const char* key, const std::string& what) const {
    require(object.contains(key) && object[key].is_string() && !object[key].get<std::string>().empty(),
            fmt::format("{} '{}' must be a non-empty string", what, key));
    return object[key].get<std::string>();
  }

  /// An expression given as a string or a number.
  std::unique_ptr<Expression> expression(const json& v, const std::string& what,
                                         const std::vector<std::string>& names) const {
    std::string text;
    if (v.is_string())
      text = v.get<std::string>();
    else if (v.is_number())
      text = v.dump();
    else
      fail(fmt::format("{} must be an expression (a string or a number), got {}", what, excerpt(v.dump())));
    try {
      return std::make_unique<Expression>(text, fmt::format("{} '{}'", what, text), names);
    } catch (const Error& e) {
      for (const auto& p : parameters)  // named where only a scalar argument's value may name it
        if (std::find(names.begin(), names.end(), p) == names.end() &&
            std::string(e.what()).find("unknown name '" + p + "'") != std::string::npos)
          fail(fmt::format("{} '{}': '{}' is a run-time parameter; only a scalar argument's value may name it (the "
                           "grid, block, defines and restrictions are the config's and the problem's)",
                           what, text, p));
      fail(e.what());
    }
  }

  std::vector<std::unique_ptr<Expression>> geometry(const json& v, const std::string& what,
                                                    const std::vector<std::string>& names) const {
    std::vector<std::unique_ptr<Expression>> out;
    if (!v.is_array()) {
      out.push_back(expression(v, what, names));
      return out;
    }
    require(!v.empty() && v.size() <= 3, fmt::format("{} must have 1 to 3 entries (x, y, z)", what));
    for (std::size_t i = 0; i < v.size(); ++i)
      out.push_back(expression(v[i], fmt::format("{}[{}]", what, "xyz"[i]), names));
    return out;
  }

  /// A config of `space`'s tunables (those not given: their first value); `in_domain` false takes any integer
  /// values (the reference's: a simple config needs no place in the search).
  Config config(const json& v, const Space& space, const std::string& what, bool in_domain = true) const {
    require(v.is_object(), what + " must be an object of tunable values");
    Config c;
    try {
      c = Config::from_json(v);
      for (const auto& p : space.params())
        if (!c.has(p.name)) c.set(p.name, p.values.front());
      if (in_domain) space.check_member(c);
      for (const auto& [name, value] : c.values()) space.param(name);  // an unknown name, in_domain or not
    } catch (const Error& e) {
      fail(what + ": " + e.what());
    }
    return c;
  }

  std::string where_;
};

/// "matmul<{tile}, {wpt}>" -> the {expr} parts; the text between stays.
std::vector<std::string> braced_parts(const std::string& text, const Reader& r) {
  std::vector<std::string> parts;
  for (std::size_t pos = 0;;) {
    const std::size_t open = text.find('{', pos);
    if (open == std::string::npos) break;
    const std::size_t close = text.find('}', open);
    r.require(close != std::string::npos, fmt::format("kernel '{}': '{{' without a closing '}}'", text));
    parts.push_back(text.substr(open + 1, close - open - 1));
    pos = close + 1;
  }
  return parts;
}

/// A tolerance: the max relative L2 error, or {"rtol": that, "atol": the max RMS error, which passes an output
/// whose answer is near zero (a sum that cancels) where the relative error cannot}.
void read_tolerance(const Reader& r, const json& v, const std::string& what, std::optional<double>& rtol,
                    std::optional<double>& atol) {
  const auto number = [&](const json& x, const std::string& name) {
    r.require(x.is_number() && std::isfinite(x.get<double>()) && x.get<double>() >= 0,
              fmt::format("{}{} must be a non-negative number", what, name));
    return x.get<double>();
  };
  if (!v.is_object()) {
    rtol = number(v, " (the max relative L2 error; or {\"rtol\": ..., \"atol\": ...})");
    return;
  }
  r.known_fields(v, what, {"rtol", "atol"});
  if (v.contains("rtol")) rtol = number(v["rtol"], ": rtol (max relative L2 error)");
  if (v.contains("atol")) atol = number(v["atol"], ": atol (max RMS error)");
}

fs::path resolve(const fs::path& base, const std::string& file) {
  const fs::path p(file);
  return p.is_absolute() ? p : base / p;
}

}  // namespace

std::shared_ptr<const KernelSpec> load_spec(const fs::path& path) {
  Reader r(path);
  std::error_code ec;
  r.require(fs::is_regular_file(path, ec), "no such spec file");
  auto spec = std::make_shared<KernelSpec>();
  spec->path = path;
  spec->text = read_file(path);
  const json j = parse_json_input(spec->text, "kernel spec " + path.string(), ErrorKind::kInvalidInput,
                                  "docs/kernel-spec.md gives the format");
  r.require(j.is_object(), "a kernel spec is a JSON object");
  r.known_fields(j, "spec",
                 {"name", "summary", "source", "sources", "include_dirs", "kernel", "defines", "define_tunables",
                  "dtypes", "problem", "problems", "tunables", "default", "candidates", "restrictions", "grid",
                  "block", "shared_bytes", "buffers", "args", "parameters", "reference", "tolerance", "flops",
                  "bytes", "restore_inouts"});
  const fs::path base = path.parent_path().empty() ? fs::path(".") : path.parent_path();

  spec->name = r.string_at(j, "name", "spec");
  r.require(is_identifier(spec->name),
            fmt::format("name '{}' must be an identifier (letters, digits, _)", spec->name));
  spec->summary = j.value("summary", "kernel spec " + path.filename().string());

  // ---- sources
  r.require(j.contains("source") != j.contains("sources"), "give either 'source' (a file) or 'sources' (a list)");
  const json sources = j.contains("source") ? json::array({j["source"]}) : j["sources"];
  r.require(sources.is_array() && !sources.empty(), "'sources' must be a non-empty list of file names");
  for (const auto& s : sources) {
    r.require(s.is_string(), "a source must be a file name, got " + excerpt(s.dump()));
    spec->sources.push_back(resolve(base, s.get<std::string>()));
    r.require(fs::is_regular_file(spec->sources.back(), ec),
              fmt::format("source '{}' {} (looked at {})", s.get<std::string>(), not_a_file(spec->sources.back()),
                          spec->sources.back().string()));
  }
  for (const auto& d : j.value("include_dirs", json::array())) {
    r.require(d.is_string(), "'include_dirs' must be a list of folder names");
    spec->include_dirs.push_back(resolve(base, d.get<std::string>()));
  }

  // ---- problem: dtypes and dims
  for (const auto& d : j.value("dtypes", json::array({"f32"}))) {
    r.require(d.is_string(), "'dtypes' must be a list of dtype names");
    try {
      templates::parse_dtype(d.get<std::string>());
    } catch (const Error& e) {
      r.fail(std::string("dtypes: ") + e.what());
    }
    spec->dtypes.push_back(d.get<std::string>());
  }
  r.require(!spec->dtypes.empty(), "'dtypes' must not be empty");
  r.require(j.contains("problem") && j["problem"].is_object() && !j["problem"].empty(),
            "'problem' must be an object of dimension names and sizes, e.g. {\"n\": 4096}: the default problem");
  auto problem_of = [&](const json& dims, const std::string& what) {
    templates::Problem p{spec->dtypes.front(), {}};
    r.require(dims.is_object(), what + " must be an object of dimension sizes");
    for (const auto& [k, v] : dims.items()) {
      r.require(is_identifier(k),
                fmt::format("{}: dimension '{}' must be an identifier (letters, digits, _)", what, k));
      r.require(!is_expression_word(k), reserved(what + ": dimension", k));
      r.require(v.is_number_integer() && v.get<std::int64_t>() >= 1,
                fmt::format("{}: dimension '{}' must be a positive integer, got {}", what, k, excerpt(v.dump())));
      p.dims[k] = v.get<std::int64_t>();
    }
    return p;
  };
  spec->problems.push_back(problem_of(j["problem"], "problem"));
  for (const auto& [k, v] : spec->problems.front().dims) spec->dims.push_back(k);
  for (const auto& extra : j.value("problems", json::array())) {
    templates::Problem p = problem_of(extra, "problems");
    std::vector<std::string> names;
    for (const auto& [k, v] : p.dims) names.push_back(k);
    r.require(names == spec->dims, fmt::format("problems: every problem names the dimensions {} (as 'problem' does)",
                                               fmt::join(spec->dims, ", ")));
    spec->problems.push_back(std::move(p));
  }
  for (std::size_t i = 1; i < spec->dtypes.size(); ++i)  // one class per dtype, for checks and CI
    spec->problems.push_back({spec->dtypes[i], spec->problems.front().dims});

  // ---- tunables
  r.require(j.contains("tunables") && j["tunables"].is_object(),
            "'tunables' must be an object: name -> list of integer values");
  r.require(!j["tunables"].empty(),
            "'tunables' is empty: a spec tunes at least one parameter (for a kernel with none, give one of a "
            "single value, e.g. \"tunables\": {\"unused\": [0]})");
  std::vector<Param> params;
  std::set<std::string> dim_set(spec->dims.begin(), spec->dims.end());
  // In the file's order, as Kernel Tuner's tune_params are: the space's parameters, its walk and its listing.
  std::vector<std::string> tunable_names;
  const auto in_order = nlohmann::ordered_json::parse(spec->text);
  for (const auto& [name, v] : in_order.at("tunables").items()) tunable_names.push_back(name);
  for (const auto& name : tunable_names) {
    const json& v = j["tunables"][name];
    r.require(is_identifier(name),
              fmt::format("tunable '{}' must be an identifier", name));
    r.require(!is_expression_word(name), reserved("tunable", name));
    r.require(!dim_set.count(name), fmt::format("'{}' is both a tunable and a problem dimension", name));
    Param p{name, {}, "tunable of " + spec->name};
    json values = v;
    if (v.is_object()) {
      r.known_fields(v, "tunable '" + name + "'", {"values", "about"});
      values = v.value("values", json());
      if (v.contains("about") && v["about"].is_string()) p.trades_off = v["about"].get<std::string>();
    }
    r.require(values.is_array() && !values.empty(),
              fmt::format("tunable '{}' must be a non-empty list of integers", name));
    for (const auto& x : values) {
      r.require(x.is_number_integer(),
                fmt::format("tunable '{}': value {} is not an integer", name, excerpt(x.dump())));
      const auto value = x.get<std::int64_t>();
      // Twice in the list would be two points of one config: measured twice, counted twice.
      r.require(std::find(p.values.begin(), p.values.end(), value) == p.values.end(),
                fmt::format("tunable '{}': value {} is listed twice", name, value));
      p.values.push_back(value);
    }
    params.push_back(std::move(p));
  }
  spec->space = Space(std::move(params));
  if (j.contains("default")) spec->default_config = r.config(j["default"], spec->space, "default");
  if (j.contains("candidates")) {
    r.require(j["candidates"].is_array(), "'candidates' must be a list of configs");
    for (std::size_t i = 0; i < j["candidates"].size(); ++i)
      spec->candidates.push_back(r.config(j["candidates"][i], spec->space, fmt::format("candidates[{}]", i)));
  }

  std::vector<std::string> dims = spec->dims;
  std::vector<std::string> all = dims;
  for (const auto& p : spec->space.params()) all.push_back(p.name);
  r.require(std::find(all.begin(), all.end(), "dtype") == all.end(),
            "'dtype' is the problem's element type ({dtype} in 'kernel', a define's value); name the dimension or "
            "tunable otherwise");
  // A {part} of a name expression, or a define's value: `dtype` (null: the problem's element type) or an expression.
  const auto part_or_dtype = [&](const json& v, const std::string& what) -> std::unique_ptr<Expression> {
    if (v.is_string() && std::regex_match(v.get<std::string>(), std::regex("\\s*dtype\\s*"))) return nullptr;
    return r.expression(v, what, all);
  };

  // ---- run-time parameters: names scalar arguments may use, with their values in checks and tuning
  std::vector<std::string> with_parameters = all;
  if (j.contains("parameters")) {
    r.require(j["parameters"].is_object(), "'parameters' must be an object: name -> number (its value in checks)");
    for (const auto& [name, v] : j["parameters"].items()) {
      r.require(is_identifier(name),
                fmt::format("parameter '{}' must be an identifier", name));
      r.require(!is_expression_word(name), reserved("parameter", name));
      r.require(std::find(all.begin(), all.end(), name) == all.end(),
                fmt::format("'{}' is both a parameter and a problem dimension or tunable", name));
      r.require(v.is_number() && std::isfinite(v.get<double>()),
                fmt::format("parameter '{}': its value in checks and tuning must be a finite number, not {}", name,
                            excerpt(v.dump())));
      spec->parameters[name] = v.get<double>();
      with_parameters.push_back(name);
      r.parameters.push_back(name);
    }
  }

  // ---- kernel and defines
  spec->kernel = r.string_at(j, "kernel", "spec");
  for (const auto& part : braced_parts(spec->kernel, r))
    spec->kernel_parts.push_back(part_or_dtype(part, fmt::format("kernel '{}': template argument", spec->kernel)));
  if (j.contains("defines")) {
    r.require(j["defines"].is_object(), "'defines' must be an object: macro name -> expression");
    for (const auto& [name, v] : j["defines"].items()) {
      r.require(is_identifier(name),
                fmt::format("define '{}' must be a macro name", name));
      spec->defines.emplace_back(name, part_or_dtype(v, "define " + name));
    }
  }
  // Kernel Tuner writes each tunable as a macro ahead of the source; `"define_tunables": true` does so, ahead of
  // 'defines', so a Kernel Tuner kernel runs unchanged.
  if (j.contains("define_tunables")) {
    r.require(j["define_tunables"].is_boolean(), "'define_tunables' must be true or false");
    if (j["define_tunables"].get<bool>()) {
      std::vector<std::pair<std::string, std::unique_ptr<Expression>>> tunables;
      for (const auto& p : spec->space.params()) {
        r.require(std::none_of(spec->defines.begin(), spec->defines.end(),
                               [&](const auto& d) { return d.first == p.name; }),
                  fmt::format("'defines' names '{}', a tunable 'define_tunables' defines already", p.name));
        tunables.emplace_back(p.name, r.expression(json(p.name), "define " + p.name, all));
      }
      spec->defines.insert(spec->defines.begin(), std::make_move_iterator(tunables.begin()),
                           std::make_move_iterator(tunables.end()));
      spec->kernel_tuner_macros = true;
    }
  }

  // ---- restrictions, launch geometry
  for (const auto& v : j.value("restrictions", json::array()))
    spec->restrictions.push_back(r.expression(v, "restriction", all));
  r.require(j.contains("grid") && j.contains("block"), "'grid' and 'block' (expressions, x [, y [, z]]) are required");
  spec->grid = r.geometry(j["grid"], "grid", all);
  spec->block = r.geometry(j["block"], "block", all);
  if (j.contains("shared_bytes")) spec->shared_bytes = r.expression(j["shared_bytes"], "shared_bytes", all);

  // ---- buffers and arguments
  r.require(j.contains("buffers") && j["buffers"].is_array() && !j["buffers"].empty(),
            "'buffers' must be a non-empty list");
  std::set<std::string> buffer_names;
  for (const auto& b : j["buffers"]) {
    r.require(b.is_object(), "a buffer is an object {\"name\", \"count\", \"role\", ...}");
    r.known_fields(b, "buffer", {"name", "dtype", "count", "init", "file", "role", "tolerance", "constant"});
    BufferSpec buf;
    buf.name = r.string_at(b, "name", "buffer");
    const std::string what = "buffer '" + buf.name + "'";
    r.require(buffer_names.insert(buf.name).second, what + " is defined twice");
    if (b.contains("dtype")) {
      buf.dtype_from_problem = false;
      try {
        buf.dtype = templates::parse_dtype(r.string_at(b, "dtype", what));
      } catch (const Error& e) {
        r.fail(what + ": " + e.what());
      }
    }
    r.require(b.contains("count"), what + ": 'count' (elements, an expression over the problem's dims) is required");
    buf.count = r.expression(b["count"], what + " count", dims);
    const std::string role = b.value("role", "input");
    if (role == "input")
      buf.role = Role::kInput;
    else if (role == "output")
      buf.role = Role::kOutput;
    else if (role == "inout")
      buf.role = Role::kInOut;
    else if (role == "scratch")  // the kernel's own workspace: written and read by it, never checked
      buf.role = Role::kScratch;
    else
      r.fail(fmt::format("{}: role '{}' is not one of input, output, inout, scratch", what, role));
    // An output's start is not the kernel's to read: it is poisoned (all bits
    // set) before every checked run, so an init would be a promise not kept.
    r.require(buf.role != Role::kOutput || !b.contains("init"),
              fmt::format("{}: an output starts poisoned (all bits set) before every checked run, so it takes no "
                          "init; a kernel that reads it first (accumulates into it: +=, atomicAdd) needs role inout "
                          "(with init zeros to start from 0)",
                          what));
    const std::string init =
        b.value("init", buf.role == Role::kOutput || buf.role == Role::kScratch ? "zeros" : "random");
    if (init == "random")
      buf.init = Init::kRandom;
    else if (init == "zeros")
      buf.init = Init::kZeros;
    else if (init == "file")
      buf.init = Init::kFile;
    else
      r.fail(fmt::format("{}: init '{}' is not one of random, zeros, file", what, init));
    if (b.contains("tolerance")) {
      r.require(buf.role != Role::kInput && buf.role != Role::kScratch,
                fmt::format("{}: {} is not checked, so it takes no tolerance", what,
                            buf.role == Role::kInput ? "an input" : "a scratch buffer"));
      read_tolerance(r, b["tolerance"], what + ": 'tolerance'", buf.tolerance, buf.atol);
    }
    if (b.contains("constant")) {
      buf.constant = r.string_at(b, "constant", what);
      r.require(is_identifier(buf.constant),
                fmt::format("{}: 'constant' names a __constant__ variable of the source (an identifier), not '{}'",
                            what, buf.constant));
      r.require(buf.role == Role::kInput,
                fmt::format("{}: a buffer copied into __constant__ '{}' must be an input (constant memory is "
                            "read-only to kernels)",
                            what, buf.constant));
      for (const auto& other : spec->buffers)
        r.require(other.constant != buf.constant,
                  fmt::format("{}: buffer '{}' is copied into __constant__ '{}' already", what, other.name,
                              buf.constant));
    }
    if (buf.init == Init::kFile) {
      buf.file = resolve(base, r.string_at(b, "file", what));
      r.require(fs::is_regular_file(buf.file, ec),
                fmt::format("{}: file {} {}", what, buf.file.string(), not_a_file(buf.file)));
    }
    spec->buffers.push_back(std::move(buf));
  }
  // Triton's restore_value: a kernel whose in-place results change its next launch's work is timed from its inputs
  // as uploaded.
  if (j.contains("restore_inouts")) {
    r.require(j["restore_inouts"].is_boolean(), "'restore_inouts' must be true or false");
    spec->restore_inouts = j["restore_inouts"].get<bool>();
    r.require(!spec->restore_inouts ||
                  std::any_of(spec->buffers.begin(), spec->buffers.end(),
                              [](const BufferSpec& b) { return b.role == Role::kInOut; }),
              "'restore_inouts' restores the buffers of role inout before each timed launch, and none has it");
  }
  r.require(j.contains("args") && j["args"].is_array(), "'args' (the kernel's arguments in order) is required");
  for (std::size_t i = 0; i < j["args"].size(); ++i) {
    const json& a = j["args"][i];
    const std::string what = fmt::format("args[{}]", i);
    ArgSpec arg;
    if (a.is_string()) {
      arg.buffer = a.get<std::string>();
      r.require(buffer_names.count(arg.buffer),
                fmt::format("{}: no buffer '{}'; buffers: {} (a scalar is {{\"type\": \"i32\", \"value\": \"n\"}})",
                            what, arg.buffer, fmt::join(buffer_names, ", ")));
    } else {
      r.require(a.is_object(), what + " must be a buffer name or {\"type\": ..., \"value\": ...}");
      r.known_fields(a, what, {"name", "type", "value"});
      arg.type = r.string_at(a, "type", what);
      static const std::set<std::string> types = {"i32", "i64", "u32", "u64", "f32", "f64"};
      r.require(types.count(arg.type),
                fmt::format("{}: type '{}' is not one of i32, i64, u32, u64, f32, f64", what, arg.type));
      r.require(a.contains("value"), what + ": 'value' (an expression) is required");
      arg.value = r.expression(a["value"], what + " value", with_parameters);
    }
    spec->args.push_back(std::move(arg));
  }
  // So does a buffer no argument passes: its output would stay poisoned, its input go unread (unless the kernel
  // reads it from constant memory).
  for (const auto& b : spec->buffers)
    r.require(!b.constant.empty() || std::any_of(spec->args.begin(), spec->args.end(),
                                                 [&b](const ArgSpec& a) { return a.buffer == b.name; }),
              fmt::format("buffer '{}' is passed by no argument, so no kernel would see it; name it in 'args'{}",
                          b.name,
                          b.role == Role::kInput
                              ? " (or copy it into a __constant__ variable of the source: \"constant\": \"name\")"
                              : ""));
  // A parameter no argument reads reaches no kernel: a misspelt name, or one an argument lost.
  for (const auto& [name, value] : spec->parameters)
    r.require(std::any_of(spec->args.begin(), spec->args.end(),
                          [&name = name](const ArgSpec& a) { return a.value && a.value->uses(name); }),
              fmt::format("parameter '{}' is read by no argument's value, so no kernel would take it; name it in "
                          "one (args: {{\"type\": \"f32\", \"value\": \"{}\"}})",
                          name, name));

  // ---- reference
  r.require(j.contains("reference") && j["reference"].is_object(),
            "'reference' is required: {\"kernel\": ..., \"config\": ...}, {\"config\": ...} or {\"files\": ...}");
  const json& ref = j["reference"];
  r.known_fields(ref, "reference", {"kernel", "config", "grid", "block", "files"});
  auto& reference = spec->reference;
  if (ref.contains("files")) {
    reference.kind = ReferenceSpec::Kind::kFiles;
    r.require(!ref.contains("kernel") && !ref.contains("config"), "reference: 'files' goes alone");
    r.require(ref["files"].is_object() && !ref["files"].empty(), "reference 'files' maps output buffers to files");
    for (const auto& [name, f] : ref["files"].items()) {
      const auto it = std::find_if(spec->buffers.begin(), spec->buffers.end(),
                                   [&name = name](const BufferSpec& b) { return b.name == name; });
      r.require(it != spec->buffers.end() && checked(*it),
                fmt::format("reference files: no output buffer '{}'", name));
      r.require(f.is_string(), "reference files: a file name per output buffer");
      reference.files[name] = resolve(base, f.get<std::string>());
      r.require(fs::is_regular_file(reference.files[name], ec),
                fmt::format("reference file {} {}", reference.files[name].string(),
                            not_a_file(reference.files[name])));
    }
  } else {
    reference.kind = ref.contains("kernel") ? ReferenceSpec::Kind::kKernel : ReferenceSpec::Kind::kConfig;
    r.require(ref.contains("kernel") || ref.contains("config"),
              "reference needs 'kernel' (another kernel of the source), 'config' or 'files'");
    if (ref.contains("config")) reference.config = r.config(ref["config"], spec->space, "reference config", false);
    if (ref.contains("kernel")) {
      reference.kernel = r.string_at(ref, "kernel", "reference");
      for (const auto& part : braced_parts(reference.kernel, r))
        reference.kernel_parts.push_back(part_or_dtype(part, "reference kernel template argument"));
    }
    if (ref.contains("grid")) reference.grid = r.geometry(ref["grid"], "reference grid", all);
    if (ref.contains("block")) reference.block = r.geometry(ref["block"], "reference block", all);
  }
  for (const auto& b : spec->buffers) {
    if (b.role != Role::kOutput)
      r.require(reference.kind != ReferenceSpec::Kind::kFiles || b.init != Init::kRandom,
                fmt::format("buffer '{}' starts random, but answers from files need fixed inputs (init file or zeros)",
                            b.name));
    if (checked(b))
      r.require(reference.kind != ReferenceSpec::Kind::kFiles || reference.files.count(b.name),
                fmt::format("reference files: output buffer '{}' has no answer file", b.name));
  }
  bool has_output = false;
  for (const auto& b : spec->buffers) has_output = has_output || checked(b);
  r.require(has_output, "no buffer has role output or inout: nothing to check");

  if (j.contains("tolerance")) read_tolerance(r, j["tolerance"], "'tolerance'", spec->tolerance, spec->atol);
  if (j.contains("flops")) spec->flops = r.expression(j["flops"], "flops", dims);
  if (j.contains("bytes")) spec->bytes = r.expression(j["bytes"], "bytes", dims);
  return spec;
}

}  // namespace ktune::spec
