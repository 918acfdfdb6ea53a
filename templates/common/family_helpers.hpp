// Helpers every kernel family's host side shares: integer rounding, the
// problem dtype's activation type, the bound on a tensor's elements that
// problem checks apply, the reason a constraint gives, configs
// written as changes of another, checks of the buffer addresses a plan
// receives, and workload buffers made from the values the CPU reference
// computes with.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/device_limits.hpp"
#include "base/space.hpp"
#include "templates/problem.hpp"
#include "templates/workload.hpp"

namespace ktune::templates {

/// a / b rounded up, for positive a and b.
constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

/// The most elements one tensor of a problem may hold: 2^40 (4 TiB of fp32),
/// past any device's memory, and far enough within int64 that the byte
/// counts, buffer sizes and indices a family computes from its dims cannot
/// overflow.
inline constexpr std::int64_t kMaxTensorElements = std::int64_t{1} << 40;
inline constexpr const char* kMaxTensorElementsText = "2^40";

/// The product of `factors` (each at least 0), or nothing where it
/// overflows int64.
std::optional<std::int64_t> checked_product(std::initializer_list<std::int64_t> factors);
/// mean(x_i^2) over `x`, in the order given; 0 for none. Its square root is
/// the RMS that tolerances scaled by a tensor's size are made of.
double mean_square(std::span<const double> x);
/// Throws kInvalidInput unless the product of the problem's dimensions
/// `dims` (each already checked to be at least 1) is at most
/// kMaxTensorElements, in one line naming `family`, the tensor (`what`:
/// "the logits"), the dimensions with their values and the bound. A product
/// past int64 is refused, not wrapped. Checks call it before anything is
/// sized from the dims.
void require_elements_within(const std::string& family, const Problem& problem,
                             std::initializer_list<const char*> dims, const std::string& what);

/// Problems whose dtype names the activations' type: "bf16" (bf16
/// activations; weights, statistics and math stay fp32) or "f32".
bool is_bf16(const Problem& problem);
DType activation_dtype(const Problem& problem);
std::int64_t activation_bytes(const Problem& problem);
/// The activations' type as the templates name it: `float` or `kt::bf16`.
const char* activation_type(const Problem& problem);

/// The grid of a grid-stride kernel that has `blocks` blocks of work: capped
/// at `blocks_per_sm` per SM of `device` when that is positive (a persistent
/// grid; 0 is no cap), and at the gridDim.x limit.
unsigned grid_stride_blocks(std::int64_t blocks, std::int64_t blocks_per_sm, const DeviceLimits& device);

/// For `is_valid`: stores `reason` in `why` (when given) and returns false.
bool reject(std::string* why, std::string reason);

/// `base` with the parameters named in `changes` set: a candidate written as
/// what it changes of the default.
Config with(Config base, std::initializer_list<std::pair<const char*, std::int64_t>> changes);

/// Throws kInvalidInput unless `address` is a multiple of `align` bytes;
/// `accesses` says what needs it ("the config's vector accesses").
void require_aligned(const std::string& family, const char* buffer, std::uint64_t address, std::int64_t align,
                     const char* accesses);
/// Throws kInvalidInput unless there is one address per buffer of `names`
/// (the workload's buffers, in order).
void require_addresses(const std::string& family, const std::vector<std::uint64_t>& addresses,
                       const std::vector<std::string>& names);

/// `values` as a buffer of `dtype` (f32 or bf16) stores them: exact for f32
/// inputs, rounded to the nearest bf16 for bf16.
std::vector<double> stored_as(DType dtype, const std::vector<float>& values);
/// An input buffer holding `values`; pass values already `stored_as` the
/// dtype, so that the reference computes on exactly what the kernel reads.
HostBuffer input_buffer(std::string name, DType dtype, const std::vector<double>& values);
/// An output buffer of values.size() elements of `dtype` expecting `values`
/// rounded to the dtype, checked with the dtype's tolerance.
HostBuffer output_buffer(std::string name, DType dtype, const std::vector<double>& values);

}  // namespace ktune::templates
