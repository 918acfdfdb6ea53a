#include "templates/workload.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "base/error.hpp"
#include "templates/render.hpp"

namespace ktune::templates {

const char* to_string(Role role) {
  switch (role) {
    case Role::kInput: return "input";
    case Role::kOutput: return "output";
    case Role::kInOut: return "inout";
    case Role::kScratch: return "scratch";
  }
  return "?";
}

namespace {
template <class Convert>
double rel_l2(std::size_t n, Convert at_pair) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto [g, e] = at_pair(i);
    if (!std::isfinite(g) || !std::isfinite(e)) return std::numeric_limits<double>::infinity();
    num += (g - e) * (g - e);
    den += e * e;
  }
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

template <class T>
T load(const std::vector<std::byte>& v, std::size_t i) {
  T x;
  std::memcpy(&x, v.data() + i * sizeof(T), sizeof(T));
  return x;
}
}  // namespace

double value_at(DType t, const std::vector<std::byte>& bytes, std::size_t i) {
  switch (t) {
    case DType::kF32: return load<float>(bytes, i);
    case DType::kBF16: return bf16_bits_to_float(load<std::uint16_t>(bytes, i));
    case DType::kF16: return f16_bits_to_float(load<std::uint16_t>(bytes, i));
    case DType::kI32: return load<std::int32_t>(bytes, i);
    case DType::kI64: return static_cast<double>(load<std::int64_t>(bytes, i));
    case DType::kU8: return load<std::uint8_t>(bytes, i);
  }
  return 0;
}

double relative_l2(DType t, const std::vector<std::byte>& got, const std::vector<std::byte>& expected) {
  if (got.size() != expected.size()) return std::numeric_limits<double>::infinity();
  if (t != DType::kF32 && t != DType::kBF16 && t != DType::kF16 && t != DType::kI32)
    return got == expected ? 0.0 : std::numeric_limits<double>::infinity();
  return rel_l2(got.size() / size_of(t), [&](std::size_t i) {
    return std::pair<double, double>(value_at(t, got, i), value_at(t, expected, i));
  });
}

std::string mismatch_detail(DType t, const std::vector<std::byte>& got, const std::vector<std::byte>& expected) {
  if (got.size() != expected.size()) return "";
  const std::size_t n = got.size() / size_of(t);
  if (is_integer(t)) {
    // Exact, in the type's own arithmetic (an i64 past 2^53 is no double). Every element 1 below, modulo the
    // type (the all-ones an output starts as, plus what was added): a kernel that adds to its output.
    const auto at = [&](const std::vector<std::byte>& v, std::size_t i) -> std::int64_t {
      return t == DType::kI64 ? load<std::int64_t>(v, i)
             : t == DType::kI32 ? load<std::int32_t>(v, i)
                                : load<std::uint8_t>(v, i);
    };
    const auto wrapped = [&](std::int64_t d) {  // d modulo the type's range, in its signed form
      return t == DType::kI32 ? static_cast<std::int64_t>(static_cast<std::int32_t>(d))
             : t == DType::kU8 ? static_cast<std::int64_t>(static_cast<std::int8_t>(d))
                               : d;
    };
    bool all_off_by_poison = n > 0;
    std::size_t furthest = 0;
    std::uint64_t worst = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t g = at(got, i), x = at(expected, i);
      const auto difference = static_cast<std::uint64_t>(g) - static_cast<std::uint64_t>(x);
      const std::int64_t d = wrapped(static_cast<std::int64_t>(difference));
      all_off_by_poison = all_off_by_poison && d == -1;
      const std::uint64_t off = g >= x ? difference : 0 - difference;
      if (off > worst) {
        worst = off;
        furthest = i;
      }
    }
    if (all_off_by_poison)
      return "every element is 1 below the reference's: an output starts as all ones, so a kernel that adds to it "
             "needs role inout, with init zeros";
    if (worst == 0) return "";
    return fmt::format("furthest off at index {}: {}, expected {}", furthest, at(got, furthest),
                       at(expected, furthest));
  }
  if (t != DType::kF32 && t != DType::kBF16 && t != DType::kF16) return "";
  // Not finite where the answer is: the poison itself (all ones: a NaN), never written or copied from memory
  // never written; an infinity, which no NaN gives, so an overflow; another NaN, computed (inf - inf, 0 * inf).
  struct Count {
    std::size_t count = 0, first = 0;
    void add(std::size_t i) { first = count++ == 0 ? i : first; }
  } poisoned, infinite, computed;
  const std::size_t size = size_of(t);
  std::size_t furthest = 0;
  double worst = -1;
  for (std::size_t i = 0; i < n; ++i) {
    const double g = value_at(t, got, i), x = value_at(t, expected, i);
    if (!std::isfinite(g) && std::isfinite(x)) {
      const bool poison = std::all_of(got.begin() + static_cast<std::ptrdiff_t>(i * size),
                                      got.begin() + static_cast<std::ptrdiff_t>((i + 1) * size),
                                      [](std::byte b) { return b == std::byte{0xff}; });
      (poison ? poisoned : std::isinf(g) ? infinite : computed).add(i);
    } else if (std::abs(g - x) > worst) {
      worst = std::abs(g - x);
      furthest = i;
    }
  }
  std::vector<std::string> said;
  if (poisoned.count > 0)
    said.push_back(fmt::format("{} of {} elements not finite (never written, or computed from memory read before it "
                               "was written?), the first at index {}",
                               poisoned.count, n, poisoned.first));
  if (infinite.count > 0)
    said.push_back(fmt::format("{} of {} elements infinite where the reference's are finite (overflow?), the first "
                               "at index {}",
                               infinite.count, n, infinite.first));
  if (computed.count > 0)
    said.push_back(fmt::format("{} of {} elements a computed NaN where the reference's are finite (from an "
                               "overflow, inf - inf or 0 * inf, or from memory read before it was written?), the "
                               "first at index {}",
                               computed.count, n, computed.first));
  if (!said.empty()) return fmt::format("{}", fmt::join(said, "; "));
  if (worst <= 0) return "";
  return fmt::format("furthest off at index {}: {:.6g}, expected {:.6g}", furthest, value_at(t, got, furthest),
                     value_at(t, expected, furthest));
}

double rms_error(DType t, const std::vector<std::byte>& got, const std::vector<std::byte>& expected) {
  const std::size_t n = got.size() / size_of(t);
  if (got.size() != expected.size() || n == 0) return got.size() == expected.size() ? 0.0 : INFINITY;
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = value_at(t, got, i) - value_at(t, expected, i);
    if (!std::isfinite(d)) return INFINITY;
    sum += d * d;
  }
  return std::sqrt(sum / static_cast<double>(n));
}
namespace {

/// `error(got, expected)` over the whole buffer, or the larger of it over `b`'s elements set apart and over the
/// others.
template <class Error>
double worse_part(const HostBuffer& b, const std::vector<std::byte>& got, Error error) {
  const std::size_t size = size_of(b.dtype), n = b.expected.size() / size;
  if (b.apart.empty() || b.apart.size() != n || got.size() != b.expected.size()) return error(got, b.expected);
  double worst = 0;
  for (const std::uint8_t flag : {std::uint8_t{0}, std::uint8_t{1}}) {
    std::vector<std::byte> part_got, part_expected;
    for (std::size_t i = 0; i < n; ++i)
      if ((b.apart[i] != 0) == (flag != 0)) {
        part_got.insert(part_got.end(), got.begin() + static_cast<std::ptrdiff_t>(i * size),
                        got.begin() + static_cast<std::ptrdiff_t>((i + 1) * size));
        part_expected.insert(part_expected.end(), b.expected.begin() + static_cast<std::ptrdiff_t>(i * size),
                             b.expected.begin() + static_cast<std::ptrdiff_t>((i + 1) * size));
      }
    const double e = error(part_got, part_expected);
    if (!(e <= worst)) worst = e;  // a NaN too
  }
  return worst;
}

}  // namespace

double relative_error(const HostBuffer& b, const std::vector<std::byte>& got) {
  return worse_part(b, got, [&](const auto& g, const auto& e) { return relative_l2(b.dtype, g, e); });
}

double rms_error(const HostBuffer& b, const std::vector<std::byte>& got) {
  return worse_part(b, got, [&](const auto& g, const auto& e) { return rms_error(b.dtype, g, e); });
}

namespace {

/// The integers of `got` that differ from `b`'s expected ones by more than its atol (0: any difference).
std::size_t integers_off(const HostBuffer& b, const std::vector<std::byte>& got) {
  const std::size_t size = size_of(b.dtype), n = got.size() / size;
  if (got.size() != b.expected.size()) return std::max<std::size_t>(1, n);
  std::size_t off = 0;
  for (std::size_t i = 0; i < n; ++i)
    off += b.atol > 0 ? std::abs(value_at(b.dtype, got, i) - value_at(b.dtype, b.expected, i)) > b.atol
                      : std::memcmp(got.data() + i * size, b.expected.data() + i * size, size) != 0;  // past 2^53 too
  return off;
}

/// An element of a floating-point buffer further off its reference than kElementTolerances of the buffer's
/// tolerances allow (of the larger of its answer's magnitude and the RMS of the answers that are not zero), where
/// the whole buffer passes: a relative L2 error spreads one wrong element (a tail a vector width misses) over every
/// right one.
struct ElementOff {
  std::size_t index = 0;
  double bound = 0, rms = 0;
};
constexpr double kElementTolerances = 16;

std::optional<ElementOff> element_off(const HostBuffer& b, const std::vector<std::byte>& got) {
  const DType t = b.dtype;
  if (t != DType::kF32 && t != DType::kBF16 && t != DType::kF16) return std::nullopt;
  if (got.size() != b.expected.size()) return std::nullopt;
  const std::size_t n = got.size() / size_of(t);
  // The RMS of the answers that are not zero: a reference checked on a sample of rows (attention's at large
  // shapes) leaves the others zero, which would shrink the scale of the rows it checks.
  double squares = 0;
  std::size_t nonzero = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = value_at(t, b.expected, i);
    squares += x * x;
    nonzero += x != 0 ? 1 : 0;
  }
  const double rms = nonzero ? std::sqrt(squares / static_cast<double>(nonzero)) : 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = value_at(t, b.expected, i), off = std::abs(value_at(t, got, i) - x);
    const double bound = kElementTolerances * std::max(b.tolerance * std::max(std::abs(x), rms), b.atol);
    if (off > bound) return ElementOff{i, bound, rms};  // a NaN is not, and fails the L2 check
  }
  return std::nullopt;
}

/// Whether the buffer as a whole passes: within its tolerance as a relative L2 error (NaN compares false), or
/// within its atol as an RMS error.
bool whole_within(const HostBuffer& b, const std::vector<std::byte>& got, double relative) {
  return relative <= b.tolerance || (b.atol > 0 && rms_error(b, got) <= b.atol);
}

}  // namespace

bool within_tolerance(const HostBuffer& b, const std::vector<std::byte>& got, double relative) {
  if (is_integer(b.dtype)) return integers_off(b, got) == 0;  // counts and indices exact, or within an atol given
  return whole_within(b, got, relative) && !element_off(b, got);
}

std::string mismatch(const HostBuffer& b, const std::vector<std::byte>& got, double error) {
  if (is_integer(b.dtype) && got.size() == b.expected.size()) {
    const std::string detail = mismatch_detail(b.dtype, got, b.expected);
    return fmt::format("{}: {} of {} integers differ from the reference's ({}){}", b.name, integers_off(b, got),
                       got.size() / size_of(b.dtype),
                       b.atol > 0 ? fmt::format("by more than the atol {:g}", b.atol)
                                  : std::string("integers are compared exactly, or within an atol given"),
                       detail.empty() ? "" : " (" + detail + ")");
  }
  if (const auto off = whole_within(b, got, error) ? element_off(b, got) : std::nullopt)
    return fmt::format("{} element {} is {:.6g}, expected {:.6g}: off by more than {} tolerances ({:.3g}) of the "
                       "larger of its reference's magnitude and the buffer's RMS {:.3g}, though the relative L2 "
                       "error {:.3g} is within {:.1g} (one element wrong among right ones: a tail, a boundary?)",
                       b.name, off->index, value_at(b.dtype, got, off->index),
                       value_at(b.dtype, b.expected, off->index), kElementTolerances, off->bound, off->rms, error,
                       b.tolerance);
  const std::string detail = mismatch_detail(b.dtype, got, b.expected);
  return fmt::format(
      "{} relative L2 error {:.3g} > {:.1g}{}{}", b.name, error, b.tolerance,
      b.atol > 0 ? fmt::format(" and RMS error {:.3g} > atol {:.1g}", rms_error(b, got), b.atol) : "",
      detail.empty() ? "" : " (" + detail + ")");
}

double require_match(const HostBuffer& b, const std::vector<std::byte>& got, const std::string& what) {
  const double e = relative_error(b, got);
  if (!within_tolerance(b, got, e)) throw_error(ErrorKind::kCheckFailed, what + ": " + mismatch(b, got, e));
  return e;
}

std::vector<BufferShape> shapes_of(const Workload& workload) {
  std::vector<BufferShape> shapes;
  for (const auto& b : workload.buffers) shapes.push_back({b.name, b.role, b.dtype, b.bytes.size()});
  return shapes;
}

}  // namespace ktune::templates
