// A training run's bits, for the deterministic runs' checks on any backend:
// the weights it saves and its kernel summary.
#pragma once
#include <fstream>
#include <iterator>
#include <string>

#include <catch2/catch.hpp>

#include "model/train.hpp"
#include "support.hpp"

namespace ktune::test {

struct SavedRun {
  std::string weights;  ///< the saved file's bytes
  std::string summary;  ///< the runtime's kernel summary
};

/// Trains `o`, its weights saved as `name` in the scratch folder `folder`.
inline SavedRun train_saved(model::TrainOptions o, const std::string& folder, const std::string& name) {
  o.save = (scratch_dir(folder) / (name + ".safetensors")).string();
  SavedRun run;
  model::train(o, {}, [&](const model::TrainStart& start) { run.summary = start.runtime.kernel_summary(); });
  std::ifstream in(o.save, std::ios::binary);
  run.weights.assign(std::istreambuf_iterator<char>(in), {});
  REQUIRE(!run.weights.empty());
  return run;
}

}  // namespace ktune::test
