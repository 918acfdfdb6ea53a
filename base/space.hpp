// Search-space vocabulary: named integer parameters with finite domains,
// configs as named values, and lazy enumeration by mixed-radix index (a
// 10^6-point space is never materialised). It sits in base/ because families
// (templates/) declare their spaces and search/ walks them. Constraints live
// with each family (`is_valid`); this file knows nothing about kernels.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ktune {

/// One tunable: a name, its allowed values (in a fixed order), and what it
/// trades off (shown by `ktune render --help-space`).
struct Param {
  std::string name;
  std::vector<std::int64_t> values;
  std::string trades_off;
};

/// A point of a space: parameter name → value. Ordered by name, so printing
/// and hashing are stable whatever order the user wrote.
class Config {
 public:
  Config() = default;
  explicit Config(std::map<std::string, std::int64_t> values) : values_(std::move(values)) {}

  std::int64_t at(const std::string& name) const;
  void set(const std::string& name, std::int64_t v) { values_[name] = v; }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  const std::map<std::string, std::int64_t>& values() const { return values_; }

  nlohmann::json to_json() const;
  static Config from_json(const nlohmann::json& j);  ///< throws kInvalidInput
  std::string str() const;                            ///< compact JSON, one line

  friend bool operator==(const Config&, const Config&) = default;
  friend bool operator<(const Config& a, const Config& b) { return a.values_ < b.values_; }

 private:
  std::map<std::string, std::int64_t> values_;
};

/// The Cartesian product of parameter domains.
class Space {
 public:
  Space() = default;
  explicit Space(std::vector<Param> params) : params_(std::move(params)) {}

  const std::vector<Param>& params() const { return params_; }
  const Param& param(const std::string& name) const;  ///< throws kInvalidInput
  std::uint64_t size() const;                          ///< product of domain sizes

  /// The config at mixed-radix `index` in [0, size()); the first parameter
  /// varies slowest.
  Config at(std::uint64_t index) const;
  /// Inverse of `at`; nullopt when a value lies outside its domain.
  std::optional<std::uint64_t> index_of(const Config& config) const;

  /// Checks that `config` names exactly this space's parameters with values
  /// in their domains; throws kInvalidInput saying what is wrong and allowed.
  void check_member(const Config& config) const;

  /// Neighbours that differ in one parameter by one domain step.
  std::vector<Config> neighbours(const Config& config) const;

 private:
  std::vector<Param> params_;
};

}  // namespace ktune
