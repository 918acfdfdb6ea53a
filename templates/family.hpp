// The kernel family interface (STYLE.md habits 1-3): everything about one
// kernel lives in templates/<family>/ behind this class — its search space
// and constraints, rendering to self-contained source with NVRTC name
// expressions, launch plan, workload with CPU reference, FLOP/byte counts.
// Runners (GPU, emulation, replay) and the search never see more than this.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/device_limits.hpp"
#include "base/space.hpp"
#include "templates/launch.hpp"
#include "templates/problem.hpp"
#include "templates/workload.hpp"

namespace ktune::templates {

using ktune::DeviceLimits;

/// Run-time scalars by name: the values a launch takes beside its buffers.
using Scalars = std::map<std::string, double>;

/// The shortest decimal that reads back as `value`, as a double (0.9f is
/// 0.9, not 0.899999976): how an f32 scalar's value is shown and given.
double shortest(float value);
/// `value` as the f32 a kernel argument holds; throws kInvalidInput (naming
/// `family` and `name`) where it is past f32's range.
float f32_scalar(const std::string& family, const std::string& name, double value);

class Family {
 public:
  virtual ~Family() = default;

  virtual std::string name() const = 0;
  /// How a message that no config can fix names the family: a built-in
  /// family's name, a kernel spec's file (where the fault is to be mended).
  virtual std::string origin() const { return name(); }
  virtual std::string summary() const = 0;  ///< one line for `--help` and listings
  /// The template files (paths under templates/) whose text the family hash covers.
  virtual std::vector<std::string> source_files() const = 0;
  virtual const Space& space() const = 0;

  /// Small problems, one per supported class (dtype, head dim, causal, ...):
  /// what CI compiles and what emulation tests run.
  virtual std::vector<Problem> problem_classes() const = 0;
  /// Checks a problem; throws kInvalidInput saying what is accepted.
  virtual void check_problem(const Problem& problem) const = 0;
  /// The dtypes and dimensions of the family's problems (ProblemForm::of its classes).
  ProblemForm problem_form() const;
  /// The one check of a problem given from outside (the command line, a
  /// session): a missing or unknown dimension is named with the family's
  /// dims (require_dims), then check_problem checks the values.
  void check(const Problem& problem) const;

  /// The default on every architecture the project targets (valid on sm_80).
  virtual Config default_config(const Problem& problem) const = 0;
  /// A better default than default_config on `device`'s architecture, where
  /// the family knows one: a shape valid there alone (sm_90's wgmma kernels,
  /// say) that beat default_config where it was measured. tuner::default_on
  /// takes it first where it is valid on the device (callers check, so a
  /// family returns its shape without).
  virtual std::optional<Config> arch_default(const Problem& problem, const DeviceLimits& device) const {
    (void)problem, (void)device;
    return std::nullopt;
  }
  /// Configs a tuning session measures right after the default, before its
  /// strategy proposes any, and reports to the strategy: shapes that do well
  /// elsewhere (FlashAttention-2's partitions, say) and that a short budget
  /// might not reach in a large space. Points of the space, in order; a
  /// session skips those that are the default or not valid on its device.
  virtual std::vector<Config> candidates(const Problem& problem) const {
    (void)problem;
    return {};
  }
  /// Whether `config` can run `problem` on `device`; if not and `why` is
  /// given, says which constraint failed.
  virtual bool is_valid(const Config& config, const Problem& problem, const DeviceLimits& device,
                        std::string* why = nullptr) const = 0;

  virtual Rendered render(const Config& config, const Problem& problem) const = 0;
  virtual Workload make_workload(const Problem& problem, std::uint64_t seed) const = 0;
  /// The same with its reference run at `scalars`' values (those not given
  /// keep theirs): what `run --parameters` and `tune --parameters` check, and
  /// the values the workload's launches take. Every family with scalars
  /// overrides it (the default, for those without, takes none).
  virtual Workload make_workload(const Problem& problem, std::uint64_t seed, const Scalars& scalars) const;
  /// Throws kInvalidInput, before any work, where make_workload cannot
  /// check at `scalars`' values: a name the family does not take, a value
  /// that is not finite or that a launch would refuse (an AdamW beta of 1).
  virtual void require_checkable(const Problem& problem, const Scalars& scalars) const;
  /// The buffers a launch takes for `problem`, in the order of
  /// Workload::buffers and of `plan`'s addresses (a scratch buffer sized for
  /// every config), without making them: what a program allocates (the
  /// run-time API asks for a kernel with it), so from the sizes alone, never
  /// by making the workload and its CPU reference.
  virtual std::vector<BufferShape> buffer_shapes(const Problem& problem) const = 0;
  /// The outputs a launch may write in place of an input, as (output, input)
  /// names of buffer_shapes: the two given the very same address
  /// (cross_entropy_bwd's dlogits over its logits, an elementwise op's y over
  /// its x). The run-time API refuses any other overlap of a buffer written
  /// with another. Default: none.
  virtual std::vector<std::pair<std::string, std::string>> in_place(const Problem& problem) const {
    (void)problem;
    return {};
  }
  /// Scalars a launch takes beside its buffers, by name, with the values the
  /// workload's reference, checks and tuning use: what a program sets at each
  /// launch (AdamW's learning rate and step, a softmax scale, a primitive's
  /// alpha, a kernel spec's parameters). Empty where there are none; those
  /// compiled into the kernel (RMSNorm's eps) are none.
  virtual Scalars scalars(const Problem& problem) const {
    (void)problem;
    return {};
  }
  /// scalars(problem) with `given` in their place: the full set a launch
  /// takes. Throws kInvalidInput naming a scalar the family does not take
  /// (and those it does) or a value that is not finite.
  Scalars resolve_scalars(const Problem& problem, const Scalars& given) const;
  /// Launches that run `config` on the workload whose buffers live at
  /// `addresses` (same order as Workload::buffers), with its scalars.
  virtual std::vector<Launch> plan(const Config& config, const Problem& problem,
                                   const std::vector<std::uint64_t>& addresses,
                                   const DeviceLimits& device) const = 0;
  /// The same with `scalars` given values (those not given keep the
  /// workload's); a scalar the family does not take, or a value its kernel
  /// cannot, is refused (kInvalidInput).
  virtual std::vector<Launch> plan(const Config& config, const Problem& problem,
                                   const std::vector<std::uint64_t>& addresses, const DeviceLimits& device,
                                   const Scalars& scalars) const;

  /// Device scratch bytes a run of `config` needs besides its named buffers
  /// (partial sums, say); the caller allocates them and passes the address.
  virtual std::size_t workspace_bytes(const Config& config, const Problem& problem) const {
    (void)config, (void)problem;
    return 0;
  }
  /// Whether launches at `config` give the same bits run after run: no sum
  /// in an order that changes between runs (fp32 atomics, whose order is the
  /// blocks'). A deterministic run takes only such configs
  /// (tuner::choose_config). Default: true.
  virtual bool deterministic(const Config& config) const {
    (void)config;
    return true;
  }
  /// Whether the host emulation can run `config` (Hopper-only paths, wgmma
  /// and TMA, compile everywhere but run only on a GPU).
  virtual bool runs_emulated(const Config& config, const Problem& problem) const {
    (void)config, (void)problem;
    return true;
  }
  /// Whether a run under the emulation compiles the variant with NVRTC too,
  /// and takes its resources for the fit check: for kernels written outside
  /// the project (kernel specs), which the host compiler may take where NVRTC
  /// does not (host headers' names) and whose shared memory or registers may
  /// not fit a GPU. The project's own are compiled by their tests.
  virtual bool compiled_with_nvrtc_under_emulation() const { return false; }
  /// Whether a launch's in-place results change the next launch's work, so a
  /// measurement restores the workload's inout buffers before each repetition,
  /// outside what is timed (grad_norm: gradients clipped once need no scaling
  /// after, and its scale launch would return at once). Default: false (an
  /// AdamW step moves as many bytes whatever the weights hold).
  virtual bool timing_restores_inouts() const { return false; }

  virtual double flops(const Problem& problem) const = 0;
  virtual double bytes(const Problem& problem) const = 0;  ///< minimum DRAM traffic

  /// Hash of the family's template text (with kt.cuh): cache entries made
  /// from another text are stale. Families whose source is not a template
  /// (kernel specs) hash their own files.
  virtual std::string source_hash() const;
};

/// A family's run-time face: `ArgsT` names its device buffers (a struct of
/// addresses, like CUTLASS's `Arguments`), so a runtime writes
/// `family.plan(config, problem, {.x = x, .w = w, .y = y, .rstd = rstd}, device)`.
/// The workload-driven `Family::plan` is an adapter over it: `args_of` names
/// the workload's buffers, given in Workload::buffers order.
template <class ArgsT>
class TypedFamily : public Family {
 public:
  using Args = ArgsT;
  virtual std::vector<Launch> plan(const Config& config, const Problem& problem, const Args& args,
                                   const DeviceLimits& device) const = 0;
  /// The workload's buffer addresses as Args; throws kInvalidInput when their
  /// count is not the workload's.
  virtual Args args_of(const Problem& problem, const std::vector<std::uint64_t>& addresses) const = 0;
  /// `args` with the scalars' values: `scalars` names every one of
  /// scalars(problem) (resolve_scalars). Families with scalars override it.
  virtual void set_scalars(Args& args, const Problem& problem, const Scalars& scalars) const {
    (void)args, (void)problem, (void)scalars;
  }
  /// Args holding scalars(problem) with `given`'s values, checked as a
  /// launch checks them: the values a workload's reference runs at.
  Args args_with_scalars(const Problem& problem, const Scalars& given) const {
    Args args{};
    if (const Scalars all = resolve_scalars(problem, given); !all.empty()) set_scalars(args, problem, all);
    return args;
  }
  void require_checkable(const Problem& problem, const Scalars& scalars) const override {
    (void)args_with_scalars(problem, scalars);
  }

  std::vector<Launch> plan(const Config& config, const Problem& problem, const std::vector<std::uint64_t>& addresses,
                           const DeviceLimits& device) const final {
    return plan(config, problem, args_of(problem, addresses), device);
  }
  std::vector<Launch> plan(const Config& config, const Problem& problem, const std::vector<std::uint64_t>& addresses,
                           const DeviceLimits& device, const Scalars& scalars) const final {
    Args args = args_of(problem, addresses);
    if (!scalars.empty()) set_scalars(args, problem, resolve_scalars(problem, scalars));
    return plan(config, problem, args, device);
  }
};

/// Every registered family, by name.
const std::vector<const Family*>& all_families();
/// The family called `name`; throws kInvalidInput listing the known ones.
const Family& find_family(const std::string& name);
/// The family called `name`, or null.
const Family* family_named(const std::string& name);

}  // namespace ktune::templates
