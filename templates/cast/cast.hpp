// Host side of the dtype cast families (templates/cast/cast.cuh):
//   cast_to_bf16  y = bf16(x), fp32 -> bf16, round to nearest even
//                 (the bf16 copy of the fp32 master weights, activations)
//   cast_to_f32   y = float(x), bf16 -> fp32, exact
// Two families rather than one with a direction dimension: the direction
// decides the buffers' types and the bytes per element, so a tuned config of
// one direction says nothing about the other, and the cache's nearest-shape
// fallback must never hand one direction's config to the other.
// Problems: dtype bf16 (the narrow side; the other side is fp32); one
// dimension `n`, the number of elements, any n >= 1 (ragged tails run scalar).
// Run-time arguments: Args below; workload buffers, in the order the
// workload-driven `plan` takes their addresses: x (input), y (output).
#pragma once
#include <cstdint>

#include "templates/cast/reference.hpp"
#include "templates/family.hpp"

namespace ktune::templates::cast {

/// Device addresses of a cast's buffers.
struct Args {
  std::uint64_t x = 0;  // (n,) source: f32 (cast_to_bf16) or bf16 (cast_to_f32)
  std::uint64_t y = 0;  // (n,) destination: bf16 (cast_to_bf16) or f32 (cast_to_f32); must not overlap x
};

using CastFamily = TypedFamily<Args>;

const CastFamily& to_bf16_family();
const CastFamily& to_f32_family();

}  // namespace ktune::templates::cast
