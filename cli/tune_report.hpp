// What a person reads at the end of a tuning session, and again later from
// its log (`ktune log show`): the top configs with their time, spread,
// achieved GB/s or TFLOP/s and % of the device's peak DRAM bandwidth (its
// memory clock times its bus width; `ktune bench ops` divides by the copy
// bandwidth it measures, a lower figure, for its floor) where known, and the
// speed-up over the family default, labelled as host time when the session
// ran on the emulation.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/space.hpp"
#include "search/search.hpp"
#include "templates/family.hpp"
#include "tuner/session/session.hpp"

namespace ktune::cli {

/// One evaluation as the report sees it.
struct Evaluation {
  Config config;
  bool ok = false;
  std::string failure;
  double median_ms = 0, p20_ms = 0, p80_ms = 0;
};

Evaluation evaluation_of(const search::Record& record);  ///< as the search saw it
Evaluation evaluation_of(const tuner::Record& record);  ///< as the session log holds it

/// A session to report on.
struct SessionView {
  const templates::Family* family = nullptr;
  templates::Problem problem;
  std::string backend;             ///< "gpu" or "emu"
  double peak_bandwidth_gbs = 0;   ///< 0: unknown
  std::vector<Evaluation> evaluations;  ///< in the order they ran
  std::string winner;              ///< the winner's config text, when the winner rule picked one
  /// What the session measured as the default: the family's, or on a device
  /// it does not fit the valid config nearest it (tuner::default_on).
  std::optional<Config> default_config;

  bool emulated() const { return backend == "emu"; }
  Config default_of() const { return default_config.value_or(family->default_config(problem)); }
};

/// The `k` fastest working configs as a table (markdown pipes).
std::string top_table(const SessionView& session, std::size_t k);
/// The same rows as JSON.
nlohmann::json top_json(const SessionView& session, std::size_t k);
/// "N evaluations, F failed; best B ms (X.XXx vs default, host emulation)": one line.
std::string summary_line(const SessionView& session);
/// The failed evaluations of one kind (the failure's word before its first
/// ':': validation, crashed, timeout, compile, invalid, ...).
struct FailureKind {
  std::string kind;
  std::size_t count = 0;
  const Evaluation* first = nullptr;  ///< the first of them to run
};
/// The kinds of the failed evaluations, most first.
std::vector<FailureKind> failure_kinds(const std::vector<Evaluation>& evaluations);
/// What the failed evaluations failed of, by kind, most first, with the
/// first failure's words: "3 timeout (timeout: no result within 0.001 s)";
/// empty when none failed.
std::string failure_digest(const std::vector<Evaluation>& evaluations);
/// One row a kind: how many, the first config and its reason (a table;
/// empty when none failed).
std::string failure_table(const std::vector<Evaluation>& evaluations);
/// The same rows as JSON: [{"kind", "count", "first_config", "first_reason"}].
nlohmann::json failure_json(const std::vector<Evaluation>& evaluations);
/// One evaluation on one line (KTUNE_PRINT=all).
std::string evaluation_line(std::size_t index, const Evaluation& e, bool emulated);

}  // namespace ktune::cli
