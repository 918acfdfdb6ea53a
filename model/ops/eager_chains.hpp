// Eager mode's non-GEMM kernels (DESIGN.md, "Modes on cuda"): an op whose
// family has an eager decomposition (templates/eager/eager.hpp,
// eager::decomposed_families()) runs as that chain of primitive kernels, one
// launch per primitive op as PyTorch eager issues them; an op whose family
// has none runs the family's default kernel. Compiled mode runs no chain.
//
// Here: which ops run as chains, the kernels a step's chains need (prepared
// up front with the rest, in parallel, through TunedKernels and the binary
// cache), and the scratch their temporaries take. DeviceOps::run_chain, the
// launcher of one chain, is defined in eager_chains.cpp.
#pragma once
#include <cstddef>
#include <vector>

#include "model/ops/device_ops.hpp"
#include "templates/eager/eager.hpp"
#include "templates/family.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune::model {

/// Whether an op of `family` runs as its eager chain in `mode`: eager mode,
/// and the family has a decomposition.
bool runs_as_chain(Mode mode, const templates::Family& family);

/// The kernels `requests` (a step's families and problems) need in `mode`:
/// each family that runs as a chain replaced by its chain's steps, each
/// (family, problem) once, in order of first use.
std::vector<tuner::KernelRequest> with_chains(Mode mode, const std::vector<tuner::KernelRequest>& requests);

/// Device bytes of the temporaries of `request`'s chain in `mode` (0 when the
/// op runs as its family's kernel).
std::size_t chain_temporaries_bytes(Mode mode, const tuner::KernelRequest& request);

}  // namespace ktune::model
