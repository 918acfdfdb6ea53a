// Eager mode's non-GEMM kernels (DESIGN.md, "Modes on cuda"): an op whose
// family has an eager decomposition (templates/eager/eager.hpp,
// eager::decomposed_families()) runs as that chain of primitive kernels, one
// launch per primitive op as PyTorch eager issues them; an op whose family
// has none runs the family's default kernel. Compiled mode runs no chain.
//
// Here: which ops run as chains, the kernels a step's chains need (prepared
// up front with the rest, in parallel, through TunedKernels and the binary
// cache), the scratch their temporaries take, and the plans of the chains a
// run has launched (ChainPlans). DeviceOps::run_chain, the launcher of one
// chain, is defined in eager_chains.cpp.
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "model/ops/device_ops.hpp"
#include "templates/eager/eager.hpp"
#include "templates/family.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune::model {

/// Whether an op of `family` runs as its eager chain in `mode`: eager mode,
/// and the family has a decomposition; in a `deterministic` run, one whose
/// every step sums in a fixed order (Family::deterministic: not the
/// embedding backward's index_add_, whose op then runs as its family's
/// kernel).
bool runs_as_chain(Mode mode, const templates::Family& family, bool deterministic = false);

/// The kernels `requests` (a step's families and problems) need in `mode`:
/// each family that runs as a chain replaced by its chain's steps, each
/// (family, problem) once, in order of first use.
std::vector<tuner::KernelRequest> with_chains(Mode mode, const std::vector<tuner::KernelRequest>& requests,
                                              bool deterministic = false);

/// Device bytes of the temporaries of `request`'s chain in `mode` (0 when the
/// op runs as its family's kernel).
std::size_t chain_temporaries_bytes(Mode mode, const tuner::KernelRequest& request, bool deterministic = false);

/// The eager plans a DeviceOps has built, by chain_plan_key: a step calls
/// each op with the same addresses every time, so a plan is built on an op's
/// first call and launched as it is on every later one.
struct ChainPlans {
  std::map<std::string, templates::eager::EagerPlan> plans;
};

/// What determines a chain's launches: the family, the problem, every bound
/// address and scalar (bit-exact), and the scratch bytes the op keeps before
/// the chain's temporaries (which place them).
std::string chain_plan_key(const templates::Family& family, const templates::Problem& problem,
                           const templates::eager::Bindings& args, std::size_t kept);

}  // namespace ktune::model
