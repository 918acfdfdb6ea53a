// Precision modes (see precision.hpp).
#include "model/precision.hpp"

#include "base/error.hpp"

namespace ktune::model {

const char* to_string(Precision precision) {
  switch (precision) {
    case Precision::kF32:
      return "f32";
    case Precision::kTf32:
      return "tf32";
    case Precision::kBf16:
      return "bf16";
  }
  return "?";
}

Precision parse_precision(const std::string& text) {
  for (const Precision p : {Precision::kF32, Precision::kTf32, Precision::kBf16})
    if (text == to_string(p)) return p;
  throw Error(ErrorKind::kInvalidInput, "dtype '" + text + "'; accepted: f32, tf32, bf16");
}

const char* problem_dtype(Precision precision) { return precision == Precision::kBf16 ? "bf16" : "f32"; }

AttentionSaved attention_saved(Precision precision, bool compiled) {
  return compiled && precision != Precision::kF32 ? AttentionSaved::kLogSumExp : AttentionSaved::kProbabilities;
}

}  // namespace ktune::model
