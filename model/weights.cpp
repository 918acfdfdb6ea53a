// Model weights in safetensors (see weights.hpp).
#include "model/weights.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <system_error>

#include "base/error.hpp"
#include "model/checkpoint.hpp"

namespace ktune::model {

namespace {

std::string shape_str(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::optional<double> number(const std::string& text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// A metadata value as the config's: the same text, or the same number
// written otherwise ("10000.0", as Python's str(10000.0) writes it, or "1e4").
bool same_value(const std::string& stated, const std::string& value) {
  if (stated == value) return true;
  const auto a = number(stated), b = number(value);
  return a && b && *a == *b;
}

constexpr const char* kReadDtypes = "weights are read from F32, F64, BF16 or F16 tensors (save them as "
                                    "{k: v.float() for k, v in state_dict.items()})";

double bf16_value(std::uint16_t h) {  // the upper half of an fp32
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f = 0;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

double f16_value(std::uint16_t h) {  // IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const double magnitude = exponent == 0x1f ? (mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                                                             : std::numeric_limits<double>::infinity())
                           : exponent == 0 ? std::ldexp(mantissa, -24)
                                           : std::ldexp(mantissa + 1024, exponent - 25);
  return (h & 0x8000) != 0 ? -magnitude : magnitude;
}

// The sizes a file's tensors imply, as the options that give them (the head
// count none tells): for a file whose metadata states none, as PyTorch's
// save_file(model.state_dict()) writes it. Empty where they imply no model.
std::string implied_sizes(const WeightsSource& file) {
  const auto shape = [&](const std::string& name) {
    const auto* s = file.shape(name);
    return !s || s->size() != 2 ? std::vector<std::int64_t>{} : *s;
  };
  const auto embedding = shape("token_embeddings.weight"), w1 = shape("layers.0.ffn.w1.weight");
  if (embedding.empty() || w1.empty()) return "";
  std::int64_t layers = 0;
  while (file.shape(fmt::format("layers.{}.ffn.w1.weight", layers))) ++layers;
  return fmt::format(" (its tensors are a model of --vocab {} --d-model {} --d-ff {} --layers {}: give those, and "
                     "--heads, which no shape tells)",
                     embedding[0], embedding[1], w1[0], layers);
}

}  // namespace

std::vector<double> tensor_values(const SafeTensor& t, const std::string& name) {
  std::vector<double> out(t.numel());
  if (t.dtype == "F32") {
    std::vector<float> f(t.numel());
    std::memcpy(f.data(), t.bytes.data(), f.size() * sizeof(float));
    for (std::size_t i = 0; i < f.size(); ++i) out[i] = f[i];
  } else if (t.dtype == "F64") {
    std::memcpy(out.data(), t.bytes.data(), out.size() * sizeof(double));
  } else if (t.dtype == "BF16" || t.dtype == "F16") {  // PyTorch's half-precision state dicts, widened exactly
    std::vector<std::uint16_t> h(t.numel());
    std::memcpy(h.data(), t.bytes.data(), h.size() * sizeof(std::uint16_t));
    for (std::size_t i = 0; i < h.size(); ++i) out[i] = t.dtype == "BF16" ? bf16_value(h[i]) : f16_value(h[i]);
  } else {
    throw_error(ErrorKind::kInvalidInput, fmt::format("tensor '{}' is {}; {}", name, t.dtype, kReadDtypes));
  }
  return out;
}

const std::map<std::string, std::string>& WeightsSource::metadata() const {
  return file_ ? file_->metadata : reader_->metadata();
}
const std::vector<std::string>& WeightsSource::order() const { return file_ ? file_->order : reader_->order(); }
const std::vector<std::int64_t>* WeightsSource::shape(const std::string& name) const {
  if (file_) {
    const auto it = file_->tensors.find(name);
    return it == file_->tensors.end() ? nullptr : &it->second.shape;
  }
  const TensorEntry* e = reader_->entry(name);
  return e ? &e->shape : nullptr;
}
void WeightsSource::with(const std::string& name, const std::function<void(const SafeTensor&)>& use) const {
  if (file_) {
    use(file_->at(name));
  } else {
    const SafeTensor t = reader_->read(name);
    use(t);
  }
}

template <class T>
void load_parameters(const ModelConfig& config, const ParameterLayout& layout, std::span<T> params,
                     const WeightsSource& file, const std::string& source) {
  // A file of another model's shape is refused, not read in part: its
  // metadata's sizes (where it states them) and blocks beyond the model's.
  const auto& metadata = file.metadata();
  require_rope_theta(metadata, config, source);
  if (const auto key = differing_size(metadata, config, /*absent_differs=*/false))
    throw_error(ErrorKind::kInvalidInput,
                fmt::format("{} holds weights of a model with {} {}; this run's model {} has {} (give the sizes the "
                            "weights were trained at)",
                            source, *key, metadata.at(*key), config.name, weights_metadata(config).at(*key)));
  // A checkpoint given as weights is checked as --resume checks it: a flipped bit is refused, not run.
  require_intact(file, layout, source);
  std::set<std::string> names;
  for (const auto& info : layout.tensors) names.insert(info.name);
  for (const auto& name : file.order())  // (a checkpoint's optimizer state and a saved batch's tokens are not blocks)
    KTUNE_REQUIRE(names.count(name) || name.rfind("layers.", 0) != 0,
                  fmt::format("{} holds tensor '{}', which model {} has not: weights of a model of another shape{}",
                              source, name, config.name, implied_sizes(file)));
  for (const auto& info : layout.tensors) {
    const std::vector<std::int64_t>* shape = file.shape(info.name);
    if (!shape) {
      // The state dict of a wrapped module: torch.compile's '_orig_mod.', DDP's 'module.' before every name.
      std::string prefixed;
      for (const auto& name : file.order())
        if (name.size() > info.name.size() && name.ends_with("." + info.name)) prefixed = name;
      throw_error(ErrorKind::kInvalidInput,
                  fmt::format("{} has no tensor '{}' (model {} needs {} tensors){}", source, info.name, config.name,
                              layout.tensors.size(),
                              prefixed.empty()
                                  ? (info.name.rfind("layers.", 0) == 0 ? implied_sizes(file) : "")
                                  : fmt::format("; it holds '{}': a wrapped module's state dict (torch.compile's "
                                                "'_orig_mod.', DDP's 'module.'), save the unwrapped module's or "
                                                "strip '{}' from its names",
                                                prefixed, prefixed.substr(0, prefixed.size() - info.name.size()))));
    }
    KTUNE_REQUIRE(*shape == info.shape, fmt::format("tensor '{}' in {} has shape {}, model {} expects {}{}",
                                                    info.name, source, shape_str(*shape), config.name,
                                                    shape_str(info.shape), implied_sizes(file)));
    file.with(info.name, [&](const SafeTensor& t) {
      KTUNE_REQUIRE(t.dtype == "F32" || t.dtype == "F64" || t.dtype == "BF16" || t.dtype == "F16",
                    fmt::format("tensor '{}' in {} is {}; {}", info.name, source, t.dtype, kReadDtypes));
      const auto values = tensor_values(t, info.name);
      for (std::size_t i = 0; i < values.size(); ++i) {
        // Finite as the model holds it: an F64 value past float's range would be an infinity in an f32 model.
        const T value = static_cast<T>(values[i]);
        KTUNE_REQUIRE(std::isfinite(value), fmt::format("tensor '{}' in {} holds {} at index {}: corrupt weights{}",
                                                        info.name, source, value_text(values[i]), i,
                                                        std::isfinite(values[i]) ? " (past the model's float range)"
                                                                                 : ""));
        params[info.offset + i] = value;
      }
    });
  }
}

template <class T>
void load_weights(Transformer<T>& model, const TensorFile& file, const std::string& source) {
  load_parameters<T>(model.config(), model.layout(), model.parameters(), file, source);
}

template <class T>
void load_weights(Transformer<T>& model, const std::filesystem::path& path) {
  load_parameters<T>(model.config(), model.layout(), model.parameters(), SafetensorsReader(path), path.string());
}

std::map<std::string, std::string> weights_metadata(const ModelConfig& c) {
  return {{"format", "pt"},
          {"model", c.name},
          {"vocab_size", std::to_string(c.vocab)},
          {"d_model", std::to_string(c.d_model)},
          {"d_ff", std::to_string(c.d_ff)},
          {"num_layers", std::to_string(c.layers)},
          {"num_heads", std::to_string(c.heads)},
          {"rope_theta", fmt::format("{}", c.rope_theta)}};
}

std::optional<std::string> differing_size(const std::map<std::string, std::string>& metadata,
                                          const ModelConfig& config, bool absent_differs) {
  for (const auto& [key, value] : weights_metadata(config)) {
    if (key == "format" || key == "model") continue;
    const auto it = metadata.find(key);
    if (it == metadata.end() ? absent_differs : !same_value(it->second, value)) return key;
  }
  return std::nullopt;
}

void require_rope_theta(const std::map<std::string, std::string>& metadata, const ModelConfig& config,
                        const std::string& source) {
  const auto it = metadata.find("rope_theta");
  KTUNE_REQUIRE(it == metadata.end() || same_value(it->second, weights_metadata(config).at("rope_theta")),
                fmt::format("{} holds weights of a model with rope_theta {} (its metadata); ktune runs RoPE at theta "
                            "{} in every model and no option sets another, so these weights cannot be run",
                            source, it == metadata.end() ? "" : it->second, config.rope_theta));
}

std::string value_text(double x) { return std::isnan(x) ? std::string("NaN") : fmt::format("{}", x); }

template <class T>
void require_finite_parameters(const ParameterLayout& layout, std::span<const T> params) {
  for (const auto& info : layout.tensors)
    for (std::int64_t i = 0; i < info.numel; ++i)
      if (const T x = params[info.offset + i]; !std::isfinite(x))
        throw_error(ErrorKind::kCheckFailed,
                    fmt::format("the weights are not finite (tensor '{}' holds {} at index {}): training diverged",
                                info.name, value_text(x), i));
}

template <class T>
TensorFile parameters_file(const ModelConfig& c, const ParameterLayout& layout, std::span<const T> params) {
  require_finite_parameters(layout, params);
  TensorFile file;
  file.metadata = weights_metadata(c);
  for (const auto& info : layout.tensors) {
    SafeTensor t;
    t.dtype = "F32";
    t.shape = info.shape;
    std::vector<float> f(info.numel);
    for (std::int64_t i = 0; i < info.numel; ++i) f[i] = static_cast<float>(params[info.offset + i]);
    t.bytes.assign(reinterpret_cast<const char*>(f.data()), f.size() * sizeof(float));
    file.add(info.name, std::move(t));
  }
  return file;
}

template <class T>
TensorFile weights_file(const Transformer<T>& model) {
  return parameters_file<T>(model.config(), model.layout(), model.parameters());
}

template <class T>
void save_weights(const Transformer<T>& model, const std::filesystem::path& path) {
  write_safetensors(path, weights_file(model));
}

template void load_parameters<float>(const ModelConfig&, const ParameterLayout&, std::span<float>,
                                     const WeightsSource&, const std::string&);
template void require_finite_parameters<float>(const ParameterLayout&, std::span<const float>);
template TensorFile parameters_file<float>(const ModelConfig&, const ParameterLayout&, std::span<const float>);
template void load_weights<float>(Transformer<float>&, const TensorFile&, const std::string&);
template void load_weights<double>(Transformer<double>&, const TensorFile&, const std::string&);
template void load_weights<float>(Transformer<float>&, const std::filesystem::path&);
template void load_weights<double>(Transformer<double>&, const std::filesystem::path&);
template TensorFile weights_file<float>(const Transformer<float>&);
template TensorFile weights_file<double>(const Transformer<double>&);
template void save_weights<float>(const Transformer<float>&, const std::filesystem::path&);
template void save_weights<double>(const Transformer<double>&, const std::filesystem::path&);

}  // namespace ktune::model
