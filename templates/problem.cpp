#include "templates/problem.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "base/error.hpp"
#include "base/json_input.hpp"

namespace ktune::templates {

const char* to_string(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
  }
  return "?";
}

DType parse_dtype(const std::string& s) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU8})
    if (s == to_string(t)) return t;
  throw_error(ErrorKind::kInvalidInput, "unknown dtype '" + s + "'; accepted: f32, bf16, f16, i32, i64, u8");
}

bool is_integer(DType t) { return t == DType::kI32 || t == DType::kI64 || t == DType::kU8; }

std::size_t size_of(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kBF16: case DType::kF16: return 2;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  return 1;
}

std::int64_t Problem::dim(const std::string& name) const {
  const auto it = dims.find(name);
  KTUNE_REQUIRE(it != dims.end(), "problem " + key() + " has no dimension '" + name + "'");
  return it->second;
}

std::string Problem::key() const {
  std::string k = dtype;
  for (const auto& [name, v] : dims) k += fmt::format(";{}={}", name, v);
  return k;
}

nlohmann::json Problem::to_json() const {
  nlohmann::json j = {{"dtype", dtype}, {"dims", nlohmann::json::object()}};
  for (const auto& [name, v] : dims) j["dims"][name] = v;
  return j;
}

Problem Problem::from_json(const nlohmann::json& j) {
  KTUNE_REQUIRE(j.is_object() && j.contains("dtype") && j["dtype"].is_string(),
                "a problem is {\"dtype\": \"f32\", \"dims\": {\"name\": integer, ...}}, got " + j.dump());
  Problem p;
  for (const auto& [key, v] : j.items())
    KTUNE_REQUIRE(key == "dtype" || key == "dims",
                  "a problem is {\"dtype\": \"f32\", \"dims\": {\"name\": integer, ...}}; unknown key '" + key +
                      "' in " + j.dump());
  p.dtype = j["dtype"].get<std::string>();
  if (j.contains("dims")) {
    KTUNE_REQUIRE(j["dims"].is_object(), "problem dims must be an object of integers, got " + j["dims"].dump());
    for (const auto& [name, v] : j["dims"].items()) {
      p.dims[name] = int64_of(v, "problem dimension '" + name + "'");
    }
  }
  return p;
}

ProblemForm ProblemForm::of(const std::vector<Problem>& classes) {
  ProblemForm form;
  std::set<std::string> dtypes, all;
  for (const auto& p : classes) {
    dtypes.insert(p.dtype);
    for (const auto& [name, v] : p.dims) all.insert(name);
  }
  form.dtypes.assign(dtypes.begin(), dtypes.end());
  for (const auto& name : all) {
    const bool everywhere =
        std::all_of(classes.begin(), classes.end(), [&](const Problem& p) { return p.dims.count(name) > 0; });
    (everywhere ? form.required : form.optional).push_back(name);
  }
  return form;
}

std::string ProblemForm::dims_text() const {
  std::vector<std::string> names;
  for (const auto& name : required) names.push_back(name);
  for (const auto& name : optional) names.push_back(name + " (optional)");
  std::sort(names.begin(), names.end());
  return fmt::format("{}", fmt::join(names, ", "));
}

void require_dims(const std::string& family, const Problem& problem, const ProblemForm& form) {
  // An unknown name first: a misspelt dimension is also a missing one, and the slip is what to name.
  std::vector<std::string> names = form.required;
  names.insert(names.end(), form.optional.begin(), form.optional.end());
  for (const auto& [name, v] : problem.dims)
    KTUNE_REQUIRE(std::count(names.begin(), names.end(), name) > 0,
                  fmt::format("{}: unknown dimension '{}'{}; {}'s dims: {}", family, name, did_you_mean(name, names),
                              family, form.dims_text()));
  std::vector<std::string> missing;
  for (const auto& name : form.required)
    if (!problem.dims.count(name)) missing.push_back("'" + name + "'");
  KTUNE_REQUIRE(missing.empty(), fmt::format("{}: dimension{} {} {} missing; {}'s dims: {}", family,
                                             missing.size() == 1 ? "" : "s", fmt::join(missing, ", "),
                                             missing.size() == 1 ? "is" : "are", family, form.dims_text()));
}

Problem Problem::from_key(const std::string& key) {
  Problem p;
  std::size_t start = 0;
  for (std::size_t i = 0; start <= key.size(); ++i) {
    const std::size_t end = std::min(key.find(';', start), key.size());
    const std::string item = key.substr(start, end - start);
    start = end + 1;
    if (i == 0) {
      p.dtype = item;
      continue;
    }
    const auto eq = item.find('=');
    KTUNE_REQUIRE(eq != std::string::npos && eq > 0, "problem key '" + key + "' is not dtype;name=value;...");
    try {
      std::size_t used = 0;
      p.dims[item.substr(0, eq)] = std::stoll(item.substr(eq + 1), &used);
      KTUNE_REQUIRE(used == item.size() - eq - 1, "");
    } catch (const std::exception&) {
      throw_error(ErrorKind::kInvalidInput, "problem key '" + key + "' has a dimension that is not an integer");
    }
  }
  KTUNE_REQUIRE(!p.dtype.empty(), "problem key '" + key + "' has no dtype");
  return p;
}

double tolerance_for(const std::string& dtype) {
  if (dtype == "f32") return 1e-5;
  if (dtype == "tf32") return 5e-4;
  if (dtype == "bf16" || dtype == "f16") return 1e-2;
  throw_error(ErrorKind::kInvalidInput, "no tolerance for dtype '" + dtype + "'; accepted: f32, tf32, bf16, f16");
}

}  // namespace ktune::templates
