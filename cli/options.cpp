#include "cli/options.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <utility>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/files.hpp"
#include "base/json_input.hpp"
#include "search/strategy.hpp"
#include "spec/spec_family.hpp"
#include "tuner/cuda/timing.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune::cli {

nlohmann::json parse_json_arg(const std::string& text, const std::string& what, const std::string& example) {
  return parse_json_input(text, what, ErrorKind::kInvalidInput, fmt::format("give it as JSON, e.g. '{}'", example));
}

CLI::Validator integer_within(long long lo, long long hi, const std::string& range) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        // from_chars, not CLI11's cast, which clamps a number past the type's range to its end.
        long long n = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
        if (error == std::errc::result_out_of_range)
          return fmt::format("must be an integer {}, got '{}', past the largest, {}", range, excerpt(text),
                             std::numeric_limits<long long>::max());
        if (text.empty() || error != std::errc() || end != text.data() + text.size() || n < lo || n > hi)
          return fmt::format("must be an integer {}, got '{}'", range, excerpt(text));
        return {};
      },
      "INT " + range);
}

CLI::Option* add_kernel_backend_option(CLI::App* cmd, std::string& backend, const std::string& emu_use) {
  return cmd
      ->add_option("--backend", backend,
                   fmt::format("gpu (the CUDA device), or emu (the host emulation, no GPU needed: {}; its times are "
                               "host wall times, not GPU times)",
                               emu_use))
      ->check(CLI::IsMember({"gpu", "emu"}))
      ->capture_default_str();
}

double copy_bandwidth_gbs(bool emulated) {
  if (emulated) return 0;
  std::cerr << "measuring copy bandwidth...\n";
  return tuner::measure_copy_bandwidth_gbs();
}

CLI::Validator thread_count() {
  return integer_within(1, env::kMaxThreads, fmt::format("in 1..{}", env::kMaxThreads));
}

CLI::Validator integer_at_least(long long least) {
  return integer_within(least, std::numeric_limits<long long>::max(), fmt::format(">= {}", least));
}

namespace {

// The bytes a number and unit say, before any range check; nullopt where either is not one.
std::optional<double> bytes_said(const std::string& text) {
  static const std::pair<const char*, double> kUnits[] = {
      {"B", 1},       {"kB", 1e3},           {"KB", 1e3},           {"MB", 1e6},
      {"GB", 1e9},   {"TB", 1e12},   {"KiB", 1024.0},       {"MiB", 1048576.0},    {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}};
  // A decimal number at the very start (from_chars: no leading space, '+' or hex, which stod took: ' 40GiB' and
  // '0x10GB' passed while '40 GiB' did not), then the unit.
  double number = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec != std::errc()) return std::nullopt;
  const std::string unit(end, text.data() + text.size());
  for (const auto& [name, scale] : kUnits)
    if (unit == name && std::isfinite(number * scale)) return number * scale;
  return std::nullopt;
}

}  // namespace

std::optional<std::int64_t> parse_bytes(const std::string& text) {
  const auto bytes = bytes_said(text);
  if (!bytes || *bytes < 1 || *bytes > 9.2e18) return std::nullopt;
  return static_cast<std::int64_t>(*bytes);
}

CLI::Validator byte_size() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (parse_bytes(text)) return std::string();
        // A size with its unit, but none a run could have: zero, negative, or past what 64 bits count.
        if (bytes_said(text))
          return fmt::format("must be a size of at least 1B and under 8EiB, got '{}'", excerpt(text));
        return fmt::format("must be a size with its unit, such as 40GiB, 80GB, 512MiB or 4096B, got '{}'",
                           excerpt(text));
      },
      "SIZE");
}

CLI::Validator finite_in(double lo, double hi, bool lo_open, bool hi_open) {
  const std::string interval = fmt::format("{}{:g}, {:g}{}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = std::numeric_limits<double>::quiet_NaN();
        const bool parsed = CLI::detail::lexical_cast(text, v);
        const bool inside = parsed && std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
        return inside ? std::string() : fmt::format("must be a finite number in {}, got '{}'", interval, excerpt(text));
      },
      "NUMBER in " + interval);
}

CLI::Validator fp32_at_least(double lo, bool lo_open) {
  return finite_in(lo, std::numeric_limits<float>::max(), lo_open, false);
}

const templates::Family& family_arg(const std::string& family, const std::string& spec) {
  KTUNE_REQUIRE(family.empty() != spec.empty(), "give either --family or --spec (a kernel spec file)");
  return spec.empty() ? templates::find_family(family) : spec::load_spec_family(spec);
}

const char* const kParametersHelp =
    "Run-time parameters as JSON, e.g. '{\"scale\": 0.5}': the launches take them and the reference checks at "
    "them (a built-in family's, such as AdamW's lr, beta1, beta2, eps, weight_decay and step, or a kernel spec's); "
    "default: the family's or the spec's values (render --space lists them)";

templates::Scalars parameters_arg(const templates::Family& family, const templates::Problem& problem,
                                  const std::string& text) {
  if (text.empty()) return {};
  const templates::Scalars own = family.scalars(problem);
  // The family's own, one of them, as the example; one that takes none says so.
  const nlohmann::json j =
      own.empty() ? parse_json_input(text, "--parameters", ErrorKind::kInvalidInput,
                                     fmt::format("{} takes no parameters: leave --parameters out", family.name()))
                  : parse_json_arg(text, "--parameters",
                                   nlohmann::json{{own.begin()->first, own.begin()->second}}.dump());
  KTUNE_REQUIRE(j.is_object(), "--parameters must be a JSON object: name -> number");
  templates::Scalars scalars;
  for (const auto& [name, value] : j.items()) {
    KTUNE_REQUIRE(value.is_number() && std::isfinite(value.get<double>()),
                  fmt::format("--parameters: '{}' must be a finite number, not {}", name, excerpt(value.dump())));
    scalars[name] = value.get<double>();
  }
  family.require_checkable(problem, scalars);
  return scalars;
}

templates::Problem problem_arg(const templates::Family& family, const std::string& text) {
  if (text.empty()) return family.problem_classes().front();
  nlohmann::json j = parse_json_arg(text, "--problem", family.problem_classes().front().to_json().dump());
  // The wrapper has a dtype name or an object of dims (a spec's dimension may be called "dims" or "dtype"); an
  // object that has neither is the dims alone. Without a dtype, the first problem class's.
  if (j.is_object()) {
    const bool wrapper =
        (j.contains("dtype") && j["dtype"].is_string()) || (j.contains("dims") && j["dims"].is_object());
    const std::string dtype = family.problem_classes().front().dtype;
    if (!wrapper)
      j = nlohmann::json{{"dtype", dtype}, {"dims", j}};
    else if (!j.contains("dtype"))
      j["dtype"] = dtype;
  }
  templates::Problem p;
  try {
    p = templates::Problem::from_json(j);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kInvalidInput) throw;
    throw_error(ErrorKind::kInvalidInput,
                fmt::format("--problem: {} (or the dims alone, '{{\"n\":4096}}', in the first problem class's dtype)",
                            e.what()));
  }
  family.check(p);
  return p;
}

std::optional<InvalidDefault> invalid_default(const templates::Family& family, const templates::Problem& problem,
                                              const templates::DeviceLimits& limits, const Config& def) {
  const auto* spec_family = dynamic_cast<const spec::SpecFamily*>(&family);
  const std::optional<Config> declared =
      spec_family ? spec_family->declared_default() : std::optional<Config>(family.default_config(problem));
  std::string why;
  if (!declared || def == *declared || family.is_valid(*declared, problem, limits, &why)) return std::nullopt;
  return InvalidDefault{*declared, why};
}

Config config_arg(const templates::Family& family, const templates::Problem& problem, const std::string& text,
                  const templates::DeviceLimits& limits) {
  Config c = tuner::default_on(family, problem, limits);
  if (text.empty()) return c;
  const Config given = Config::from_json(parse_json_arg(text, "--config", c.to_json().dump()));
  for (const auto& [k, v] : given.values()) {
    family.space().param(k);  // throws for an unknown name, listing the known ones
    c.set(k, v);
  }
  family.space().check_member(c);
  std::string why;
  KTUNE_REQUIRE(family.is_valid(c, problem, limits, &why),
                family.name() + " config " + c.str() + " is invalid for " + limits.arch + ": " + why);
  return c;
}

namespace {

/// The items of a comma-separated list, empty ones (",," or a comma at
/// either end) refused.
std::vector<std::string> list_items(const std::string& text, const std::string& what) {
  std::vector<std::string> items;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    KTUNE_REQUIRE(!items.back().empty() || text.empty(),
                  fmt::format("{} has an empty item in '{}'; give comma-separated items with none left out", what,
                              excerpt(text)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (text.empty()) items.clear();
  return items;
}

}  // namespace

std::vector<std::int64_t> int_list_arg(const std::string& text, const std::string& what, std::int64_t least) {
  std::vector<std::int64_t> out;
  for (const std::string& item : list_items(text, what)) {
    try {
      std::size_t used = 0;
      const long long v = std::stoll(item, &used);
      KTUNE_REQUIRE(used == item.size() && v >= least, "");
      out.push_back(v);
    } catch (const std::exception&) {
      throw_error(ErrorKind::kInvalidInput,
                  fmt::format("{} must be comma-separated {}, got '{}'", what,
                              least == 1 ? "positive integers" : fmt::format("integers >= {}", least), excerpt(text)));
    }
  }
  KTUNE_REQUIRE(!out.empty(), what + " must not be empty");
  return out;
}

std::vector<std::string> name_list_arg(const std::string& text, const std::string& what) {
  std::vector<std::string> out = list_items(text, what);
  KTUNE_REQUIRE(!out.empty(), what + " must name at least one, got '" + text + "'");
  return out;
}

CLI::Validator input_file() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        const std::string why = not_a_file(path);
        return why.empty() ? why : path + " " + why;
      },
      "FILE");
}

CLI::Validator output_file(bool stdout_too) {
  return CLI::Validator(
      [stdout_too](std::string& path) -> std::string {
        if (path.empty()) return "an empty path; give a file path";
        if (path == "-" && !stdout_too) return "'-' is no file, and this option does not write to stdout; give a file "
                                               "path (./- for a file named '-')";
        return "";
      },
      "PATH");
}

CLI::Validator json_text() {
  return CLI::Validator(
      [](std::string& text) -> std::string { return text.empty() ? "an empty text; give a JSON object" : ""; },
      "JSON");
}

CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& text) -> std::string { return text.empty() ? "an empty value; give a name" : ""; }, "TEXT");
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec, ea, eb;
  if (std::filesystem::equivalent(a, b, ec)) return true;  // false, with ec set, unless both exist
  const auto ca = std::filesystem::weakly_canonical(std::filesystem::absolute(a), ea);
  const auto cb = std::filesystem::weakly_canonical(std::filesystem::absolute(b), eb);
  return !ea && !eb && ca == cb;
}

void require_distinct_files(const std::vector<FileArg>& inputs, const std::vector<FileArg>& outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].path.empty()) continue;
    const auto clash = [&](const FileArg& other, const char* kind) {
      KTUNE_REQUIRE(other.path.empty() || !same_file(outputs[i].path, other.path),
                    fmt::format("{} and {} name the same file ({}): it would overwrite {}; give another path",
                                outputs[i].option, other.option, outputs[i].path, kind));
    };
    for (const FileArg& in : inputs) clash(in, "what the run reads");
    for (std::size_t j = i + 1; j < outputs.size(); ++j) clash(outputs[j], "the other's output");
  }
}

std::string family_choices() {
  std::vector<std::string> names;
  for (const auto* f : templates::all_families()) names.push_back(f->name());
  return fmt::format("one of: {}", fmt::join(names, ", "));
}

std::string strategy_choices() { return fmt::format("one of: {}", fmt::join(search::strategy_names(), ", ")); }

}  // namespace ktune::cli
