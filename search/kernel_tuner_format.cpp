// Kernel Tuner cache files: gzip-aware reading and writing.
#include "search/kernel_tuner_format.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/error.hpp"
#include "base/files.hpp"
#include "base/json_input.hpp"

namespace ktune::search {
using nlohmann::json;

namespace {
std::string read_maybe_gzip(const std::filesystem::path& file) {
  gzFile in = gzopen(file.c_str(), "rb");  // reads plain files transparently
  if (in == nullptr)
    throw_error(ErrorKind::kIo, fmt::format("cannot read {}: {}", file.string(), std::strerror(errno)));
  std::string text;
  char buf[1 << 16];
  int n;
  while ((n = gzread(in, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  int err = 0;
  const char* msg = gzerror(in, &err);
  const bool bad = n < 0 || (err != Z_OK && err != Z_STREAM_END);
  // zlib's message may begin with the path it was given: the file is named once.
  std::string why = bad ? msg : "";
  if (const std::string path = file.string() + ": "; why.rfind(path, 0) == 0) why.erase(0, path.size());
  gzclose(in);
  if (bad) throw_error(ErrorKind::kInvalidInput, fmt::format("cannot decompress {}: {}", file.string(), why));
  return text;
}

std::string gzip(const std::string& text) {
  z_stream zs{};
  KTUNE_REQUIRE(deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK,
                "zlib: deflateInit2 failed");
  std::string out(deflateBound(&zs, text.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) throw_error(ErrorKind::kInternal, "zlib: deflate did not finish");
  return out;
}

std::string kernel_tuner_error(const std::string& failure) {
  if (failure.rfind("compile", 0) == 0) return "CompilationFailedConfig";
  if (failure.rfind("invalid", 0) == 0 || failure.rfind("pruned", 0) == 0) return "InvalidConfig";
  return "RuntimeFailedConfig";
}
}  // namespace

json read_kernel_tuner_cache(const std::filesystem::path& file) {
  static const std::string kExpected = "a Kernel Tuner cache file is the JSON object its tuner writes, with "
                                       "\"tune_params\" and \"cache\"";
  std::string text = read_maybe_gzip(file);
  json doc;
  try {
    doc = parse_json_input(text, file.string(), ErrorKind::kInvalidInput, kExpected);
  } catch (const Error& as_read) {
    // Kernel Tuner appends entries as it goes and closes the object at the
    // end; an interrupted session leaves "...},\n" behind.
    while (!text.empty() && (std::isspace(static_cast<unsigned char>(text.back())) || text.back() == ','))
      text.pop_back();
    try {
      doc = parse_json_input(text + "}}", file.string(), ErrorKind::kInvalidInput, kExpected);
    } catch (const Error&) {
      throw as_read;
    }
  }
  KTUNE_REQUIRE(doc.is_object() && doc.contains("tune_params") &&
                    doc["tune_params"].is_object() && doc.contains("cache") && doc["cache"].is_object(),
                fmt::format("{} is not a Kernel Tuner cache file (JSON with \"tune_params\" and \"cache\")",
                            file.string()));
  return doc;
}

json to_kernel_tuner_cache(const Space& space, const std::vector<Record>& records, const KernelTunerHeader& header) {
  json doc = {{"device_name", header.device_name},
              {"kernel_name", header.kernel_name},
              {"problem_size", header.problem_size},
              {"tune_params_keys", json::array()},
              {"tune_params", json::object()},
              {"objective", "time"},
              {"cache", json::object()}};
  for (const Param& p : space.params()) {
    doc["tune_params_keys"].push_back(p.name);
    doc["tune_params"][p.name] = p.values;
  }
  for (const Record& r : records) {
    std::string key;
    json entry = json::object();
    for (const Param& p : space.params()) {
      const auto v = r.config.at(p.name);
      key += (key.empty() ? "" : ",") + std::to_string(v);
      entry[p.name] = v;
    }
    if (r.outcome.ok) {
      // Kernel Tuner's `time` is the mean of its `times` (its runtime observers' np.average); the median where
      // the samples were not kept.
      const auto& t = r.outcome.samples_ms;
      entry["time"] = t.empty() ? r.outcome.time_ms
                                : std::accumulate(t.begin(), t.end(), 0.0) / static_cast<double>(t.size());
      if (!t.empty()) entry["times"] = t;
    } else {
      entry["time"] = kernel_tuner_error(r.outcome.failure);
    }
    // Milliseconds, as Kernel Tuner's: the compile, then the rest of the evaluation (launches, timing and the
    // check against the reference, which are not timed apart).
    entry["compile_time"] = r.outcome.compile_s * 1000;
    entry["verification_time"] = 0;
    entry["benchmark_time"] = std::max(0.0, r.outcome.cost_s - r.outcome.compile_s) * 1000;
    entry["strategy_time"] = 0;
    entry["framework_time"] = 0;
    doc["cache"][key] = entry;
  }
  return doc;
}

void write_kernel_tuner_cache(const std::filesystem::path& file, const Space& space,
                              const std::vector<Record>& records, const KernelTunerHeader& header) {
  const std::string text = to_kernel_tuner_cache(space, records, header).dump(1) + "\n";
  const bool gz = file.extension() == ".gz";
  write_file_atomic(file, gz ? gzip(text) : text);
}

}  // namespace ktune::search
