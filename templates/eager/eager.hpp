// Eager decompositions: for a fused family, the chain of primitive launches
// PyTorch eager issues for the same op (RMSNorm = square, mean, add eps,
// rsqrt, mul, mul; SwiGLU = silu, mul; cross-entropy = max, sub, exp, sum,
// log, add, gather, sub; and the backward chains autograd runs), written as
// data: a list of steps over named buffers, the fused family's own
// arguments (its workload buffer names) and temporaries. Softmax (scale,
// masked_fill with the causal mask, softmax, and the backward in reverse) is
// one more: torch.softmax is a single kernel in PyTorch, so its chain step is
// the softmax family's default config without scale or mask; RoPE on
// interleaved pairs (x1*cos - x2*sin, x1*sin + x2*cos, stack) reads its
// even/odd halves through strided views, as PyTorch's kernels do; the
// embedding is an index_select forward and a zero fill plus an index_add_
// backward. The eager mode's
// only source of non-GEMM kernels, checked against the fused family's CPU
// reference. Where they part from what PyTorch eager launches for the
// peer's model (its F.cross_entropy, x * sigmoid(x)): docs/model.md.
//
// bf16 problems compute as the model's bf16 mixed precision does: norms and
// the loss cast their bf16 activations to fp32 first (cast_to_f32), compute
// in fp32 and cast the result back (cast_to_bf16); elementwise ops (SwiGLU,
// the residual add, the scores' scale and mask) run in bf16, and softmax reads
// and writes bf16 with fp32 math inside its one kernel, as PyTorch's does.
//
// How a runtime uses it (the same for every decomposed family):
//   const Problem p{"bf16", {{"rows", tokens}, {"dim", d_model}}};
//   const std::size_t scratch = eager::temporaries_bytes("rmsnorm_fwd", p);   // allocate once
//   const auto plan = eager::plan("rmsnorm_fwd", p, eager::bind(rmsnorm::ForwardArgs{...}), scratch_address, device);
// (eager::bind_workload does the same from a fused family's workload addresses.)
//   for (const auto& step : plan.steps)   // in order, on one stream
//     load step.family->render(step.config, step.problem) (cached), then launch step.launches
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "templates/cross_entropy/cross_entropy.hpp"
#include "templates/embedding/embedding.hpp"
#include "templates/eager/primitive.hpp"
#include "templates/family.hpp"
#include "templates/rmsnorm/rmsnorm.hpp"
#include "templates/rope/rope.hpp"
#include "templates/softmax/softmax.hpp"
#include "templates/swiglu/swiglu.hpp"

namespace ktune::templates::eager {

/// Device addresses of a fused family's buffers, by their workload names
/// ("x", "w", "y", "rstd" for rmsnorm_fwd; see each family's header), and
/// its run-time scalars by their Args names (softmax's "scale").
struct Bindings : std::map<std::string, std::uint64_t> {
  using std::map<std::string, std::uint64_t>::map;
  std::map<std::string, float> scalars;
};

/// A buffer the chain needs besides the fused family's: its name, element
/// type and count. Temporaries are laid out in order, each 256-byte aligned.
struct Temporary {
  std::string name;
  DType dtype = DType::kF32;
  std::int64_t elements = 0;
};

/// One primitive launch of a chain, as data: the family (a primitive, a
/// cast, or softmax), its problem, and the buffers it reads and writes by
/// name (empty when unused).
struct Step {
  const Family* family = nullptr;
  Problem problem;
  std::string x, b, idx, y;  // as PrimArgs; a cast reads x, writes y; softmax_fwd reads x, writes y with scale
                             // alpha; softmax_bwd reads x (its y) and b (its dy), writes y (its dx)
  float alpha = 0.0f;
  std::string alpha_from;  // when set, alpha is this run-time scalar of the bindings ("scale")
};

/// A fused family's eager chain for one problem.
struct Decomposition {
  std::vector<Temporary> temporaries;
  std::vector<Step> steps;
};

/// The families that have a decomposition.
std::vector<std::string> decomposed_families();
/// The chain of `family` for `problem`; throws kInvalidInput for a family
/// without one (listing those with one) or a problem the family rejects.
Decomposition decompose(const std::string& family, const Problem& problem);
/// Device bytes of the chain's temporaries (0 when it needs none).
std::size_t temporaries_bytes(const std::string& family, const Problem& problem);

/// One step resolved to addresses: render and load `family` with `config`
/// for `problem`, then run `launches` in order.
struct EagerStep {
  const Family* family = nullptr;
  Config config;
  Problem problem;
  std::vector<Launch> launches;
};
struct EagerPlan {
  std::vector<EagerStep> steps;
  std::size_t temporaries_bytes = 0;
};

/// The launches of `family`'s chain over the buffers `args` and the
/// temporaries at `temporaries` (temporaries_bytes of device memory, 256-byte
/// aligned; 0 when none are needed). Throws kInvalidInput when an argument
/// or scalar the chain uses is not bound.
EagerPlan plan(const std::string& family, const Problem& problem, const Bindings& args, std::uint64_t temporaries,
               const DeviceLimits& device);
/// The same for a given chain (`family` names it in messages).
EagerPlan plan(const std::string& family, const Decomposition& chain, const Bindings& args, std::uint64_t temporaries,
               const DeviceLimits& device);

/// The typed faces of the decomposed families as Bindings.
Bindings bind(const rmsnorm::ForwardArgs& a);
Bindings bind(const rmsnorm::BackwardArgs& a);
Bindings bind(const rmsnorm::ResidualForwardArgs& a);
Bindings bind(const rmsnorm::ResidualBackwardArgs& a);
Bindings bind(const swiglu::ForwardArgs& a);
Bindings bind(const swiglu::BackwardArgs& a);
Bindings bind(const cross_entropy::ForwardArgs& a);
Bindings bind(const cross_entropy::BackwardArgs& a);
Bindings bind(const softmax::ForwardArgs& a);
Bindings bind(const rope::ForwardArgs& a);
Bindings bind(const embedding::ForwardArgs& a);
Bindings bind(const embedding::BackwardArgs& a);
Bindings bind(const rope::BackwardArgs& a);
Bindings bind(const softmax::BackwardArgs& a);

/// The bindings of `family`'s workload buffers at `addresses` (Workload
/// order) with the scalars its workloads are checked with: bind of the
/// family's args_of.
Bindings bind_workload(const std::string& family, const Problem& problem, const std::vector<std::uint64_t>& addresses);

}  // namespace ktune::templates::eager
