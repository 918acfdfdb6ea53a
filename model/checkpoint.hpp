// Training checkpoints: what `ktune train` needs to go on where a run
// stopped, in one safetensors file, written atomically a tensor at a time:
//   - the fp32 master weights under the state-dict names, as --save writes
//     them (so a checkpoint is also a --weights file, and safetensors'
//     load_file reads it in PyTorch);
//   - AdamW's moments under optimizer.exp_avg.<name> and
//     optimizer.exp_avg_sq.<name>;
//   - in the metadata, besides the weights' (the model's config): the
//     optimizer steps taken, the seed, the batch sampler's state and the
//     token stream it draws from, so the resumed run draws the batches the
//     uninterrupted one would have;
//   - a hash of the tensors and one of the rest of the metadata, checked
//     as the file is read, so bytes a disk or a copy changed are refused.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <string>

#include "base/safetensors.hpp"
#include "model/runtime.hpp"
#include "model/weights.hpp"

namespace ktune::model {

/// What a checkpoint holds besides the tensors.
struct CheckpointInfo {
  std::int64_t step = 0;  ///< optimizer steps taken
  std::uint64_t seed = 0;
  std::mt19937_64 sampler;  ///< the batch sampler, after `step` batches
  /// What the batches were drawn from: the token file ("" for the synthetic
  /// stream) and its length in tokens (0: not recorded), so a resumed run on
  /// another stream is caught.
  std::string tokens;
  std::int64_t tokens_count = 0;
  /// The shape the batches were drawn at (its fields 0: not recorded): a
  /// resumed run at another draws other batches than the run would have.
  RunShape shape{0, 0, 0};
  /// The lowest validation loss the run has measured (save_best's), if any.
  std::optional<double> best_val_loss;
  /// The token stream's TokenStream::fingerprint, of its ids ("": not recorded).
  std::string tokens_hash;
  /// The optimizer's and the schedule's settings the run took, option →
  /// value (train_settings; empty: not recorded), and the batches it
  /// validated on (validation_setting, under kValidationSetting), so a
  /// resume that changes them is told.
  std::map<std::string, std::string> settings;
  /// What a checkpoint written before tokens_hash was of ids records instead:
  /// the stream's TokenStream::bytes_fingerprint ("": none). Read, never written.
  std::string tokens_bytes_hash;
};

/// Writes the runtime's parameters and optimizer state with `info`; holds
/// in host memory the parameters, then the two moments (8 bytes a
/// parameter at most), never the whole file.
void write_checkpoint(const std::filesystem::path& path, Runtime& runtime, const CheckpointInfo& info);

/// The checkpoint's metadata, read from its header alone. Throws kInvalidInput
/// naming the file when it is not a ktune checkpoint (a weights file, say)
/// or was written for another model than `config`.
CheckpointInfo read_checkpoint_info(const std::filesystem::path& path, const ModelConfig& config);

/// Whether `path` holds a ktune checkpoint (of any model): a file that
/// writing weights over would lose an optimizer state and step. False for
/// a missing, unreadable or other file.
bool is_checkpoint(const std::filesystem::path& path);

/// Where `file` (whole, or read a tensor at a time) is a ktune checkpoint
/// that records hashes of its metadata and tensors, throws kInvalidInput
/// naming `source` unless both are what it was written with; a weights file,
/// or a checkpoint written before the hashes were, passes.
void require_intact(const WeightsSource& file, const ParameterLayout& layout, const std::string& source);

/// Sets the runtime's parameters and optimizer state from the checkpoint and
/// returns its info. Throws as read_checkpoint_info, and for a missing or
/// misshapen tensor.
CheckpointInfo load_checkpoint(const std::filesystem::path& path, Runtime& runtime);
/// A checkpoint's state, read and checked (as load_checkpoint checks it) before there is a runtime to give it to.
struct CheckpointState {
  CheckpointInfo info;
  std::vector<float> parameters;
  OptimizerState optimizer;
  /// Sets the runtime's parameters and AdamW state.
  CheckpointInfo apply(Runtime& runtime) &&;
};
CheckpointState read_checkpoint(const std::filesystem::path& path, const ModelConfig& config,
                                const ParameterLayout& layout);

}  // namespace ktune::model
