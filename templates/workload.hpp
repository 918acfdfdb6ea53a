// Workloads: buffers made from a seed with the CPU reference's expected
// results beside them, and the relative L2 error they are checked with.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "templates/problem.hpp"

namespace ktune::templates {

/// A buffer of the workload. Inputs are read; outputs are poisoned by the
/// runner before a validation run; in-out buffers are read and written.
enum class Role { kInput, kOutput, kInOut, kScratch };

struct HostBuffer {
  std::string name;
  Role role = Role::kInput;
  DType dtype = DType::kF32;
  std::vector<std::byte> bytes;  ///< initial contents (inputs, in-outs)
  std::vector<std::byte> expected;  ///< reference result (outputs, in-outs); empty otherwise
  double tolerance = 1e-5;          ///< max relative L2 error of the result against `expected`
  double atol = 0;  ///< max RMS error (sqrt of the mean squared difference), which also passes it: an answer near 0
  /// One flag per element, or empty: the flagged elements (a sample checked against the full reference, attention's
  /// rows at large shapes) are judged apart from the others, each set by its own relative L2 and RMS errors, so
  /// that errors in the few do not vanish in the norm of the many.
  std::vector<std::uint8_t> apart;
  /// An input's contents for timed runs, where they differ from `bytes` (empty: `bytes`): attention's at large
  /// shapes are drawn in full, where the check's rows outside its sample are zeros.
  std::vector<std::byte> timed;
  std::size_t elements() const { return bytes.size() / size_of(dtype); }
  /// What a timed run starts from.
  const std::vector<std::byte>& timed_bytes() const { return timed.empty() ? bytes : timed; }
};

/// A buffer as a launch takes it: a workload buffer's name, role, dtype and
/// size, without its contents.
struct BufferShape {
  std::string name;
  Role role = Role::kInput;
  DType dtype = DType::kF32;
  std::size_t bytes = 0;
  bool operator==(const BufferShape&) const = default;
};
/// "input" | "output" | "inout" | "scratch"
const char* to_string(Role role);
/// A buffer of `count` elements of `dtype`.
inline BufferShape buffer_shape(std::string name, Role role, DType dtype, std::int64_t count) {
  return {std::move(name), role, dtype, static_cast<std::size_t>(count) * size_of(dtype)};
}

/// Inputs made from a seed, and the CPU reference's results for them.
struct Workload {
  std::vector<HostBuffer> buffers;
};
/// Its buffers' shapes, in order.
std::vector<BufferShape> shapes_of(const Workload& workload);

/// Relative L2 error of `got` against `expected` (both of dtype `t`);
/// +inf when either holds a NaN or Inf.
double relative_l2(DType t, const std::vector<std::byte>& got, const std::vector<std::byte>& expected);
/// `got`'s relative L2 error against `b`'s expected result: the larger of its two sets' where `b` sets some
/// elements apart.
double relative_error(const HostBuffer& b, const std::vector<std::byte>& got);
/// Where `got` departs from `expected`, for a failed check's message: how
/// many elements are not finite where the answer is, and the first of them,
/// told apart by what they hold: the poison outputs start as (all ones, a
/// NaN: never written), an infinity (an overflow) or another NaN (computed);
/// else the element furthest off, with both values. Empty where there is
/// nothing to say.
std::string mismatch_detail(DType t, const std::vector<std::byte>& got, const std::vector<std::byte>& expected);
/// `got`'s relative L2 error against `b`'s expected result; throws
/// Error(kCheckFailed) "WHAT: NAME relative L2 error E > TOLERANCE" past b's
/// tolerance (a NaN included).
double require_match(const HostBuffer& b, const std::vector<std::byte>& got, const std::string& what);
/// sqrt(mean((got - expected)^2)): the error a buffer's atol bounds; +inf where either is not finite or the sizes
/// differ.
double rms_error(DType t, const std::vector<std::byte>& got, const std::vector<std::byte>& expected);
/// `got`'s RMS error against `b`'s expected result: the larger of its two sets' where `b` sets some elements apart.
double rms_error(const HostBuffer& b, const std::vector<std::byte>& got);
/// Whether `got`, `relative` off `b`'s expected result (relative_l2), passes: within b's tolerance, or within
/// its atol as an RMS error (a NaN fails), and no element further off than 16 tolerances of the larger of its
/// reference's magnitude and the RMS of its answers that are not zero (or 16 atols); integers exactly equal, or
/// each within the atol where one is given.
bool within_tolerance(const HostBuffer& b, const std::vector<std::byte>& got, double relative);
/// A failed check's words: "NAME relative L2 error E > TOLERANCE (mismatch_detail)", with the RMS error where the
/// buffer has an atol.
std::string mismatch(const HostBuffer& b, const std::vector<std::byte>& got, double error);
/// Element `i` of `bytes` holding values of type `t`, as a double.
double value_at(DType t, const std::vector<std::byte>& bytes, std::size_t i);

}  // namespace ktune::templates
