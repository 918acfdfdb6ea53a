// A Transformer's parameters to and from safetensors, under the PyTorch
// state-dict names of the CS336 model (token_embeddings.weight,
// layers.{i}.attn.q_proj.weight, ..., lm_head.weight).
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>

#include "base/safetensors.hpp"
#include "model/transformer.hpp"

namespace ktune::model {

/// The tensors of a weights file or checkpoint: held whole (a TensorFile),
/// or read one at a time from disk (a SafetensorsReader), so that loading a
/// file holds no more than one of its tensors beside the parameters it fills.
class WeightsSource {
 public:
  // Implicit: a caller passes either.
  WeightsSource(const TensorFile& file) : file_(&file) {}
  WeightsSource(const SafetensorsReader& reader) : reader_(&reader) {}
  const std::map<std::string, std::string>& metadata() const;
  /// Tensor names in the order of their data.
  const std::vector<std::string>& order() const;
  /// A tensor's shape; null when it is absent.
  const std::vector<std::int64_t>* shape(const std::string& name) const;
  /// Calls `use` with the tensor (read from disk for a reader); throws
  /// kInvalidInput when it is absent.
  void with(const std::string& name, const std::function<void(const SafeTensor&)>& use) const;

 private:
  const TensorFile* file_ = nullptr;
  const SafetensorsReader* reader_ = nullptr;
};

/// Copies every parameter of (config, layout) from `file` into the flat
/// buffer `params` (F32 or F64 tensors; extra tensors are ignored). Throws
/// kInvalidInput naming the tensor and `source` for a missing tensor, a
/// wrong shape or an unsupported dtype.
template <class T>
void load_parameters(const ModelConfig& config, const ParameterLayout& layout, std::span<T> params,
                     const WeightsSource& file, const std::string& source);
/// The metadata of a weights file: the config (model name, vocab_size,
/// d_model, d_ff, num_layers, num_heads, rope_theta) and format "pt".
std::map<std::string, std::string> weights_metadata(const ModelConfig& config);
/// The first of weights_metadata(config)'s sizes (its "format" and model
/// name aside) that `metadata` states otherwise (a number written another
/// way, "10000.0" for 10000, is the same); one it does not state differs
/// only when `absent_differs`.
std::optional<std::string> differing_size(const std::map<std::string, std::string>& metadata,
                                          const ModelConfig& config, bool absent_differs);
/// Throws kInvalidInput, naming `source`, where `metadata` states a
/// rope_theta other than `config`'s: every model runs RoPE at theta 10000 and
/// no option sets another, so such weights cannot be run.
void require_rope_theta(const std::map<std::string, std::string>& metadata, const ModelConfig& config,
                        const std::string& source);
/// A value as messages write it: "NaN" for either sign of it (printf's "-nan"
/// reads as a number), else fmt's shortest form ("inf", "0.25").
std::string value_text(double x);
/// Throws kCheckFailed naming the first parameter that is not finite
/// ("the weights are not finite (tensor 'x' holds NaN at index 3): training
/// diverged"): no weights file or checkpoint keeps such weights.
template <class T>
void require_finite_parameters(const ParameterLayout& layout, std::span<const T> params);
/// The flat buffer `params` as F32 tensors, in state-dict order, with
/// weights_metadata; require_finite_parameters first.
template <class T>
TensorFile parameters_file(const ModelConfig& config, const ParameterLayout& layout, std::span<const T> params);

/// Copies every parameter from `file` (F32 or F64 tensors; extra tensors are
/// ignored). Throws kInvalidInput naming the tensor and `source` for a
/// missing tensor, a wrong shape or an unsupported dtype.
template <class T>
void load_weights(Transformer<T>& model, const TensorFile& file, const std::string& source);
template <class T>
void load_weights(Transformer<T>& model, const std::filesystem::path& path);

/// Every parameter as an F32 tensor, in state-dict order, with the config in
/// the metadata.
template <class T>
TensorFile weights_file(const Transformer<T>& model);
template <class T>
void save_weights(const Transformer<T>& model, const std::filesystem::path& path);

/// Reads an F32, F64, BF16 or F16 tensor as doubles (any shape); throws for other dtypes.
std::vector<double> tensor_values(const SafeTensor& t, const std::string& name);

}  // namespace ktune::model
