// A kernel spec as a kernel family: the spec's tunables are the space, its
// restrictions the constraints, its source rendered with the tunables as
// defines and template arguments, its grid and block the launch plan, its
// buffers the workload, and the reference kernel (run by the host emulation),
// reference config or answer files the expected results. Everything that
// takes a family (tune, render, compile, run, the session, the cache) then
// takes a spec.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "spec/spec.hpp"
#include "templates/family.hpp"

namespace ktune::spec {

class SpecFamily final : public templates::Family {
 public:
  /// Throws kInvalidInput when the spec's name is a built-in family's or its
  /// sources cannot be read.
  explicit SpecFamily(std::shared_ptr<const KernelSpec> spec);

  const KernelSpec& spec() const { return *spec_; }
  /// What the host emulation lacks to run this spec's source (empty: it runs).
  const std::vector<std::string>& emulation_gaps() const { return source_.emulation_gaps; }
  /// Throws kInvalidInput naming the first construct the emulation lacks.
  void require_emulation() const;

  std::string name() const override { return spec_->name; }
  std::string origin() const override { return spec_->path.string(); }
  std::string summary() const override { return spec_->summary; }
  std::vector<std::string> source_files() const override;
  std::string source_hash() const override { return hash_; }
  const Space& space() const override { return spec_->space; }
  std::vector<templates::Problem> problem_classes() const override { return spec_->problems; }
  void check_problem(const templates::Problem& problem) const override;
  Config default_config(const templates::Problem& problem) const override;
  /// The spec's own `default`, valid or not (default_config passes over an invalid one).
  const std::optional<Config>& declared_default() const;
  std::vector<Config> candidates(const templates::Problem&) const override { return spec_->candidates; }
  bool is_valid(const Config& config, const templates::Problem& problem, const DeviceLimits& device,
                std::string* why = nullptr) const override;
  templates::Rendered render(const Config& config, const templates::Problem& problem) const override;
  templates::Workload make_workload(const templates::Problem& problem, std::uint64_t seed) const override;
  /// With the reference run at `parameters`' values (answer files hold the spec's own alone).
  templates::Workload make_workload(const templates::Problem& problem, std::uint64_t seed,
                                    const templates::Scalars& parameters) const override;
  void require_checkable(const templates::Problem& problem, const templates::Scalars& parameters) const override;
  std::vector<templates::BufferShape> buffer_shapes(const templates::Problem& problem) const override;
  std::vector<templates::Launch> plan(const Config& config, const templates::Problem& problem,
                                      const std::vector<std::uint64_t>& addresses,
                                      const DeviceLimits& device) const override;
  /// The spec's run-time parameters, with its values.
  templates::Scalars scalars(const templates::Problem&) const override { return spec_->parameters; }
  std::vector<templates::Launch> plan(const Config& config, const templates::Problem& problem,
                                      const std::vector<std::uint64_t>& addresses, const DeviceLimits& device,
                                      const templates::Scalars& parameters) const override;
  bool runs_emulated(const Config&, const templates::Problem&) const override { return emulation_gaps().empty(); }
  bool compiled_with_nvrtc_under_emulation() const override { return true; }
  bool timing_restores_inouts() const override;
  double flops(const templates::Problem& problem) const override;
  double bytes(const templates::Problem& problem) const override;

 private:
  Values values(const Config& config, const templates::Problem& problem) const;
  templates::Launch launch(const std::vector<std::unique_ptr<Expression>>& grid,
                           const std::vector<std::unique_ptr<Expression>>& block, const Values& v,
                           const std::vector<std::uint64_t>& addresses, const templates::Problem& problem) const;
  using Geometry = std::vector<std::unique_ptr<Expression>>;
  /// The source with the spec's defines ahead, and with define_tunables Kernel Tuner's macros of the launch of
  /// `grid` and `block`.
  std::string source_with_defines(const Values& v, const std::string& dtype, const Geometry& grid,
                                  const Geometry& block) const;
  /// The expected outputs of the reference, run by the host emulation.
  void run_reference(const templates::Problem& problem, templates::Workload& workload,
                     const templates::Scalars& parameters) const;

  std::shared_ptr<const KernelSpec> spec_;
  ExpandedSource source_;
  std::string hash_;
};

/// Reads the spec at `path` and makes its family; the family lives as long as
/// the process (runners and worker processes refer to it by address).
const SpecFamily& load_spec_family(const std::filesystem::path& path);

}  // namespace ktune::spec
