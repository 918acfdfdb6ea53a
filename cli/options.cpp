#include "cli/options.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <sstream>
#include <utility>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/json_input.hpp"
#include "search/strategy.hpp"
#include "spec/spec_family.hpp"
#include "tuner/cuda/timing.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune::cli {

nlohmann::json parse_json_arg(const std::string& text, const std::string& what) {
  return parse_json_input(text, what, ErrorKind::kInvalidInput);
}

CLI::Validator integer_within(long long lo, long long hi, const std::string& range) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        long long n = 0;
        if (!CLI::detail::lexical_cast(text, n) || n < lo || n > hi)
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

std::optional<std::int64_t> parse_bytes(const std::string& text) {
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},       {"B", 1},       {"kB", 1e3},           {"KB", 1e3},           {"MB", 1e6},
      {"GB", 1e9},   {"TB", 1e12},   {"KiB", 1024.0},       {"MiB", 1048576.0},    {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}};
  std::size_t end = 0;
  double number = 0;
  try {
    number = std::stod(text, &end);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const std::string unit = text.substr(end);
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    const double bytes = number * scale;
    if (!std::isfinite(bytes) || bytes < 1 || bytes > 9.2e18) return std::nullopt;
    return static_cast<std::int64_t>(bytes);
  }
  return std::nullopt;
}

CLI::Validator byte_size() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return parse_bytes(text) ? std::string()
                                 : fmt::format("must be a size such as 40GiB, 80GB or 512MiB, got '{}'", excerpt(text));
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

const templates::Family& family_arg(const std::string& family, const std::string& spec) {
  KTUNE_REQUIRE(family.empty() != spec.empty(), "give either --family or --spec (a kernel spec file)");
  return spec.empty() ? templates::find_family(family) : spec::load_spec_family(spec);
}

templates::Problem problem_arg(const templates::Family& family, const std::string& text) {
  if (text.empty()) return family.problem_classes().front();
  templates::Problem p = templates::Problem::from_json(parse_json_arg(text, "--problem"));
  family.check(p);
  return p;
}

Config config_arg(const templates::Family& family, const templates::Problem& problem, const std::string& text,
                  const templates::DeviceLimits& limits) {
  Config c = tuner::default_on(family, problem, limits);
  if (text.empty()) return c;
  const Config given = Config::from_json(parse_json_arg(text, "--config"));
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

std::vector<std::int64_t> int_list_arg(const std::string& text, const std::string& what) {
  std::vector<std::int64_t> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    try {
      std::size_t used = 0;
      const long long v = std::stoll(item, &used);
      KTUNE_REQUIRE(used == item.size() && v > 0, "");
      out.push_back(v);
    } catch (const std::exception&) {
      throw_error(ErrorKind::kInvalidInput, what + " must be comma-separated positive integers, got '" + text + "'");
    }
  }
  KTUNE_REQUIRE(!out.empty(), what + " must not be empty");
  return out;
}

std::vector<std::string> name_list_arg(const std::string& text, const std::string& what) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  KTUNE_REQUIRE(!out.empty(), what + " must name at least one, got '" + text + "'");
  return out;
}

std::string family_choices() {
  std::vector<std::string> names;
  for (const auto* f : templates::all_families()) names.push_back(f->name());
  return fmt::format("one of: {}", fmt::join(names, ", "));
}

std::string strategy_choices() { return fmt::format("one of: {}", fmt::join(search::strategy_names(), ", ")); }

}  // namespace ktune::cli
