// Parsing helpers shared by the subcommands: a family's config and problem
// from the command line, with the family's defaults filled in.
#pragma once
#include <string>

#include "templates/family.hpp"

namespace ktune::cli {

/// `text` as JSON; throws kInvalidInput naming `what` when malformed.
nlohmann::json parse_json_arg(const std::string& text, const std::string& what);

/// The problem from `--problem` JSON, or the family's first problem class.
templates::Problem problem_arg(const templates::Family& family, const std::string& text);

/// The family's default config for `problem`, overridden by `--config` JSON;
/// checked against the space and the family's constraints for `limits`.
Config config_arg(const templates::Family& family, const templates::Problem& problem, const std::string& text,
                  const templates::DeviceLimits& limits);

/// Comma-separated integers ("1,2,4"); throws kInvalidInput naming `what`.
std::vector<std::int64_t> int_list_arg(const std::string& text, const std::string& what);

}  // namespace ktune::cli
