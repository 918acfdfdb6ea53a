// Training checkpoints (see checkpoint.hpp).
#include "model/checkpoint.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <string_view>

#include "base/error.hpp"
#include "base/hash.hpp"
#include "base/safetensors.hpp"
#include "model/weights.hpp"

namespace ktune::model {

namespace {

constexpr const char* kFormatKey = "ktune_checkpoint";
constexpr const char* kFormatVersion = "1";
// The flat buffers in file order: parameters, exp_avg, exp_avg_sq.
constexpr const char* kPrefixes[] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."};
constexpr const char* kDataHashKey = "data_hash";   // metadata: data_hash of the tensors
constexpr const char* kMetadataHashKey = "metadata_hash";  // metadata: metadata_hash of the rest of it
// metadata: TokenStream::fingerprint of the training stream's ids; checkpoints written before it hashed the
// bytes storing them (TokenStream::bytes_fingerprint) under the second key.
constexpr const char* kTokensHashKey = "tokens_ids_hash";
constexpr const char* kTokensBytesHashKey = "tokens_hash";
constexpr const char* kSettingPrefix = "setting ";  // metadata "setting --lr": the run's --lr

std::string shape_str(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

/// The metadata's keys and values but its two hashes, in key order: written
/// beside the tensors' hash and checked whenever a checkpoint is read, so a
/// digit a disk or a copy changed in the step, the batch sampler's state or
/// a setting is refused instead of resumed at another step or on other batches.
std::string metadata_hash(const std::map<std::string, std::string>& meta) {
  Hasher h;
  for (const auto& [key, value] : meta)
    if (key != kDataHashKey && key != kMetadataHashKey) h.add(key).add(value);
  return h.hex();
}

CheckpointInfo info_of(const SafetensorsReader& file, const ModelConfig& config) {
  const std::string name = file.path().string();
  const auto& meta = file.metadata();
  const auto format = meta.find(kFormatKey);
  KTUNE_REQUIRE(format != meta.end(),
                fmt::format("{} is not a ktune checkpoint (it holds no optimizer state); to start from its weights, "
                            "give it to --weights",
                            name));
  KTUNE_REQUIRE(format->second == kFormatVersion,
                fmt::format("{} is a ktune checkpoint of format {}; this ktune reads format {}", name, format->second,
                            kFormatVersion));
  // Checkpoints written before the metadata's hash was have none to check.
  if (const auto it = meta.find(kMetadataHashKey); it != meta.end())
    KTUNE_REQUIRE(it->second == metadata_hash(meta),
                  fmt::format("{} is damaged: its metadata (the step, the batch sampler's state, the run's settings) "
                              "is not what it was written with (a disk or a copy changed it); resume from an earlier "
                              "checkpoint, or start anew",
                              name));
  const auto wanted = weights_metadata(config);
  const auto describe = [](const std::map<std::string, std::string>& m) {
    const auto get = [&](const char* key) {
      const auto it = m.find(key);
      return it == m.end() ? std::string("?") : it->second;
    };
    return fmt::format("{} (d_model {}, d_ff {}, {} layers, {} heads, vocab {}, rope theta {})", get("model"),
                       get("d_model"), get("d_ff"), get("num_layers"), get("num_heads"), get("vocab_size"),
                       get("rope_theta"));
  };
  KTUNE_REQUIRE(!differing_size(meta, config, /*absent_differs=*/true),
                fmt::format("{} is a checkpoint of model {}; this run trains {}", name, describe(meta),
                            describe(wanted)));
  CheckpointInfo info;
  const auto field = [&](const char* key) {
    const auto it = meta.find(key);
    KTUNE_REQUIRE(it != meta.end(), fmt::format("{} has no '{}' in its metadata", name, key));
    return it->second;
  };
  const std::string step = field("step"), seed = field("seed");
  const auto whole_number = [&](const std::string& text, const char* key) {
    std::size_t used = 0;
    unsigned long long value = 0;
    try {
      value = std::stoull(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    KTUNE_REQUIRE(used > 0 && used == text.size() && std::isdigit(static_cast<unsigned char>(text.front())),
                  fmt::format("{} has a malformed {} '{}' in its metadata", name, key, text));
    return value;
  };
  // No run reaches 2^62 steps; past it, the next step's number would overflow.
  const unsigned long long steps = whole_number(step, "step");
  KTUNE_REQUIRE(steps <= (1ULL << 62),
                fmt::format("{} has a step {} in its metadata, which no run reaches", name, step));
  info.step = static_cast<std::int64_t>(steps);
  info.seed = whole_number(seed, "seed");
  if (meta.count("tokens_count")) {
    info.tokens = field("tokens");
    info.tokens_count = static_cast<std::int64_t>(whole_number(meta.at("tokens_count"), "tokens_count"));
    if (meta.count(kTokensHashKey)) info.tokens_hash = field(kTokensHashKey);
    if (meta.count(kTokensBytesHashKey)) info.tokens_bytes_hash = field(kTokensBytesHashKey);
  }
  if (meta.count("micro_batches")) {
    // A run's shape counts from 1: a 0 is a file no run wrote.
    const auto count = [&](const std::string& text, const char* key) {
      const unsigned long long value = whole_number(text, key);
      KTUNE_REQUIRE(value >= 1 && value <= static_cast<unsigned long long>(std::numeric_limits<std::int32_t>::max()),
                    fmt::format("{} has a malformed {} '{}' in its metadata", name, key, text));
      return static_cast<std::int64_t>(value);
    };
    info.shape = {count(field("batch"), "batch"), count(field("context"), "context"),
                  count(meta.at("micro_batches"), "micro_batches")};
  }
  for (const auto& [key, value] : meta)
    if (key.rfind(kSettingPrefix, 0) == 0) info.settings[key.substr(std::string_view(kSettingPrefix).size())] = value;
  if (meta.count("best_val_loss")) {
    const std::string text = meta.at("best_val_loss");
    char* end = nullptr;
    const double best = std::strtod(text.c_str(), &end);
    KTUNE_REQUIRE(!text.empty() && end == text.c_str() + text.size() && std::isfinite(best),
                  fmt::format("{} has a malformed best_val_loss '{}' in its metadata", name, text));
    info.best_val_loss = best;
  }
  std::istringstream sampler(field("sampler"));
  sampler >> info.sampler;
  KTUNE_REQUIRE(!sampler.fail(), fmt::format("{} has a malformed sampler state in its metadata", name));
  return info;
}

// One flat buffer of the layout, read from the tensors named prefix + state-dict name.
/// The tensors `prefix` + each parameter's name, flat in the layout's order;
/// a value that is not finite (or, `nonnegative`, below 0: a second moment)
/// is refused as corrupt, not left to show as a diverged run.
std::vector<float> read_flat(const SafetensorsReader& file, const ParameterLayout& layout, const std::string& prefix,
                             bool nonnegative = false) {
  std::vector<float> flat(static_cast<std::size_t>(layout.total));
  for (const auto& info : layout.tensors) {
    const std::string name = prefix + info.name;
    const SafeTensor t = file.read(name);
    KTUNE_REQUIRE(t.dtype == "F32" && t.shape == info.shape,
                  fmt::format("tensor '{}' in {} is {} {}; the model's is F32 {}", name, file.path().string(), t.dtype,
                              shape_str(t.shape), shape_str(info.shape)));
    std::memcpy(flat.data() + info.offset, t.bytes.data(), t.bytes.size());
    for (std::int64_t i = 0; i < info.numel; ++i) {
      const float v = flat[static_cast<std::size_t>(info.offset + i)];
      KTUNE_REQUIRE(std::isfinite(v) && (!nonnegative || v >= 0),
                    fmt::format("tensor '{}' in {} holds {} at index {}: a corrupt checkpoint", name,
                                file.path().string(), value_text(v), i));
    }
  }
  return flat;
}

/// The tensors' bytes hashed in the order a checkpoint holds them (the
/// parameters, then AdamW's two moments, tensor by tensor; `bytes(k, tensor)`
/// gives each, k indexing kPrefixes): written into its metadata, checked whenever it is
/// read, so a bit a disk or a copy flipped is refused instead of trained on,
/// evaluated, or written into the next checkpoint.
template <class Bytes>
std::string data_hash(const ParameterLayout& layout, const Bytes& bytes) {
  Hasher h;
  for (std::size_t k = 0; k < std::size(kPrefixes); ++k)
    for (const auto& t : layout.tensors) h.add(bytes(k, t));
  return h.hex();
}

/// data_hash of the flat buffers, in kPrefixes' order.
std::string data_hash(const ParameterLayout& layout, std::initializer_list<const std::vector<float>*> flats) {
  const std::vector<const std::vector<float>*> by_prefix(flats);
  return data_hash(layout, [&](std::size_t k, const ParamInfo& t) {
    return std::string_view(reinterpret_cast<const char*>(by_prefix[k]->data() + t.offset),
                            static_cast<std::size_t>(t.numel) * sizeof(float));
  });
}

std::string damaged_tensors(const std::string& name, const char* advice) {
  return fmt::format("{} is damaged: its tensors are not the bytes it was written with (a disk or a copy changed "
                     "them); {}",
                     name, advice);
}

}  // namespace

void require_intact(const WeightsSource& file, const ParameterLayout& layout, const std::string& source) {
  const auto& meta = file.metadata();
  if (meta.count(kFormatKey) == 0) return;  // a weights file: nothing recorded to check
  constexpr const char* kAdvice = "use an earlier checkpoint, or the --save file of the run";
  if (const auto it = meta.find(kMetadataHashKey); it != meta.end())
    KTUNE_REQUIRE(it->second == metadata_hash(meta),
                  fmt::format("{} is damaged: its metadata is not what it was written with (a disk or a copy changed "
                              "it); {}",
                              source, kAdvice));
  const auto hash = meta.find(kDataHashKey);
  if (hash == meta.end()) return;  // written before the hash was
  std::string bytes;  // one tensor's at a time
  const std::string got = data_hash(layout, [&](std::size_t k, const ParamInfo& t) {
    const std::string name = kPrefixes[k] + t.name;
    KTUNE_REQUIRE(file.shape(name), damaged_tensors(source, kAdvice));
    file.with(name, [&](const SafeTensor& tensor) { bytes = tensor.bytes; });
    return std::string_view(bytes);
  });
  KTUNE_REQUIRE(got == hash->second, damaged_tensors(source, kAdvice));
}

void write_checkpoint(const std::filesystem::path& path, Runtime& runtime, const CheckpointInfo& info) {
  const ParameterLayout& layout = runtime.layout();
  std::vector<TensorEntry> entries;
  for (const char* prefix : kPrefixes)
    for (const auto& t : layout.tensors) entries.push_back({prefix + t.name, "F32", t.shape});
  std::map<std::string, std::string> metadata = weights_metadata(runtime.config());
  std::ostringstream sampler;
  sampler << info.sampler;
  metadata[kFormatKey] = kFormatVersion;
  metadata["step"] = std::to_string(info.step);
  metadata["seed"] = std::to_string(info.seed);
  metadata["sampler"] = sampler.str();
  metadata["tokens"] = info.tokens;
  metadata["tokens_count"] = std::to_string(info.tokens_count);
  if (!info.tokens_hash.empty()) metadata[kTokensHashKey] = info.tokens_hash;
  metadata["batch"] = std::to_string(info.shape.batch);
  metadata["context"] = std::to_string(info.shape.context);
  metadata["micro_batches"] = std::to_string(info.shape.micro_batches);
  if (info.best_val_loss) metadata["best_val_loss"] = fmt::format("{:.17g}", *info.best_val_loss);
  for (const auto& [option, value] : info.settings) metadata[kSettingPrefix + option] = value;
  const std::vector<float> parameters = runtime.parameters();
  require_finite_parameters<float>(layout, parameters);
  const OptimizerState state = runtime.optimizer_state();
  if (state.steps != info.step)
    throw_error(ErrorKind::kInternal, fmt::format("a checkpoint after step {} of a runtime that took {} steps",
                                                  info.step, state.steps));
  metadata[kDataHashKey] = data_hash(layout, {&parameters, &state.exp_avg, &state.exp_avg_sq});
  metadata[kMetadataHashKey] = metadata_hash(metadata);
  SafetensorsWriter writer(path, std::move(entries), metadata);
  const auto write_flat = [&](const std::vector<float>& flat) {
    for (const auto& t : layout.tensors)
      writer.write(std::string_view(reinterpret_cast<const char*>(flat.data() + t.offset),
                                    static_cast<std::size_t>(t.numel) * sizeof(float)));
  };
  write_flat(parameters);
  write_flat(state.exp_avg);
  write_flat(state.exp_avg_sq);
  writer.commit();
}

CheckpointInfo read_checkpoint_info(const std::filesystem::path& path, const ModelConfig& config) {
  return info_of(SafetensorsReader(path), config);
}

bool is_checkpoint(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  try {
    return SafetensorsReader(path).metadata().count(kFormatKey) > 0;
  } catch (const Error&) {  // not safetensors, or damaged: no checkpoint to lose
    return false;
  }
}

CheckpointState read_checkpoint(const std::filesystem::path& path, const ModelConfig& config,
                                const ParameterLayout& layout) {
  const SafetensorsReader file(path);
  CheckpointState s{info_of(file, config), read_flat(file, layout, kPrefixes[0]), {}};
  s.optimizer.exp_avg = read_flat(file, layout, kPrefixes[1]);
  s.optimizer.exp_avg_sq = read_flat(file, layout, kPrefixes[2], /*nonnegative=*/true);
  s.optimizer.steps = s.info.step;
  // Checkpoints written before the hash was have none to check.
  if (const auto it = file.metadata().find(kDataHashKey); it != file.metadata().end())
    KTUNE_REQUIRE(it->second == data_hash(layout, {&s.parameters, &s.optimizer.exp_avg, &s.optimizer.exp_avg_sq}),
                  damaged_tensors(path.string(), "resume from an earlier checkpoint, or start anew"));
  return s;
}

CheckpointInfo CheckpointState::apply(Runtime& runtime) && {
  runtime.set_parameters(parameters);
  runtime.set_optimizer_state(optimizer);
  return info;
}

CheckpointInfo load_checkpoint(const std::filesystem::path& path, Runtime& runtime) {
  return read_checkpoint(path, runtime.config(), runtime.layout()).apply(runtime);
}

}  // namespace ktune::model
