#include "tuner/bench/precision_bench.hpp"

#include <fmt/format.h>

#include <cmath>

#include "base/error.hpp"
#include "base/stamp.hpp"
#include "templates/embedded.hpp"
#include "tuner/bench/copy_text.hpp"

namespace ktune::tuner {

namespace {

const char* kKernel = R"(
// One thread: `count` additions of `value` (rounded to Addend) to a sum in
// Sum, each done in fp32 and rounded to Sum; out = {the sum, the addend}.
template <class Sum, class Addend>
__global__ void accumulate(float value, long long count, float* out) {
  const Addend x = kt::from_float<Addend>(value);
  Sum s = kt::from_float<Sum>(0.0f);
  for (long long i = 0; i < count; ++i) s = kt::from_float<Sum>(kt::to_float(s) + kt::to_float(x));
  out[0] = kt::to_float(s);
  out[1] = kt::to_float(x);
}
)";

constexpr std::int64_t kMostAdditions = 1'000'000'000;

std::string cuda_type(const std::string& dtype) {
  if (dtype == "f32") return "float";
  if (dtype == "f16") return "__half";
  return "__nv_bfloat16";
}

double relative(double error, double of) { return of != 0 ? error / std::fabs(of) : 0; }

}  // namespace

const std::vector<std::pair<std::string, std::string>>& precision_cases() {
  static const std::vector<std::pair<std::string, std::string>> cases = {
      {"f32", "f32"}, {"f16", "f16"}, {"f32", "f16"}, {"bf16", "bf16"}, {"f32", "bf16"}};
  return cases;
}

templates::Rendered precision_source() {
  templates::Rendered r;
  r.source = "// mixed-precision accumulation\n" + templates::expand_includes("common/kt.cuh") + kKernel;
  for (const auto& [sum, addend] : precision_cases())
    r.kernels.push_back(fmt::format("accumulate<{}, {}>", cuda_type(sum), cuda_type(addend)));
  return r;
}

PrecisionReport run_precision_bench(exec::Backend& backend, std::int64_t count, double value) {
  KTUNE_REQUIRE(count >= 1 && count <= kMostAdditions,
                fmt::format("precision: the count of additions must be in 1..{}, not {}", kMostAdditions, count));
  const auto value32 = static_cast<float>(value);
  KTUNE_REQUIRE(std::isfinite(value32), fmt::format("precision: the value {} is not finite in fp32", value));

  const auto module = backend.load(precision_source());
  const auto out = backend.allocate(2 * sizeof(float) * precision_cases().size(), "precision sums");
  backend.poison(*out);  // a sum never written reads NaN
  for (std::size_t i = 0; i < precision_cases().size(); ++i) {
    templates::Launch l;
    l.kernel = static_cast<int>(i);
    l.args.add(value32).add(static_cast<long long>(count)).add(out->address() + 2 * sizeof(float) * i);
    backend.launch(*module, {l});
  }
  std::vector<float> host(2 * precision_cases().size());
  backend.download(host.data(), *out, host.size() * sizeof(float));

  PrecisionReport report;
  const DeviceLimits& device = backend.device();
  report.device = device.name + " (" + device.arch + ")";
  report.driver_version = device.driver_version;
  report.date = utc_now();
  report.count = count;
  report.value = value;
  for (std::size_t i = 0; i < precision_cases().size(); ++i) {
    const auto& [sum, addend] = precision_cases()[i];
    report.rows.push_back({sum, addend, host[2 * i + 1], host[2 * i]});
  }
  return report;
}

std::string PrecisionReport::markdown() const {
  const double exact = static_cast<double>(count) * value;
  std::string s = fmt::format("Device: {}; {}; {}; ktune {} (git {})\n\n", device, driver_text(driver_version), date,
                              ktune_version(), git_revision());
  s += fmt::format(
      "Seeds 003 and 004: {} additions of {} to a sum starting at 0 (exactly {}), the addend rounded to its dtype "
      "once, each addition in fp32 rounded to the sum's dtype, as PyTorch's `s += x` loop. The error splits "
      "into the addend's rounding (count x the addend as stored, against exactly) and the sum's roundings (the "
      "sum against count x the addend as stored).\n\n",
      count, value, exact);
  s += "| sum dtype | addend dtype | addend as stored | sum | error | of it, the addend's rounding | of it, the "
       "sum's roundings |\n|:--|:--|--:|--:|--:|--:|--:|\n";
  for (const auto& r : rows) {
    const double stored = static_cast<double>(count) * r.addend;
    s += fmt::format("| {} | {} | {:.10g} | {:.6g} | {:+.3g} % | {:+.3g} % | {:+.3g} % |\n", r.sum_dtype,
                     r.addend_dtype, r.addend, r.sum, 100 * relative(r.sum - exact, exact),
                     100 * relative(stored - exact, exact), 100 * relative(r.sum - stored, exact));
  }
  return s;
}

nlohmann::json PrecisionReport::to_json() const {
  nlohmann::json j = {{"benchmark", "precision"},         {"device", device}, {"date", date},
                      {"git_revision", git_revision()},   {"ktune_version", ktune_version()},
                      {"count", count},                   {"value", value},
                      {"exact", static_cast<double>(count) * value},
                      {"rows", nlohmann::json::array()}};
  add_driver(j, driver_version);
  for (const auto& r : rows)
    j["rows"].push_back({{"sum_dtype", r.sum_dtype}, {"addend_dtype", r.addend_dtype}, {"addend", r.addend},
                         {"sum", r.sum}});
  return j;
}

}  // namespace ktune::tuner
