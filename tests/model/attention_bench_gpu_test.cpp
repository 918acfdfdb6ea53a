// The twin of attention_bench_emu_test.cpp on a GPU: eager attention's
// GEMMs on cuBLASLt, checked against the reference, then timed, at small
// ragged shapes and at two of seed 003's (seq 4096, where the check samples
// rows). Skipped without a device.
#include <catch2/catch.hpp>

#include "model/eager_attention_check.hpp"
#include "support.hpp"
#include "tuner/exec/backend.hpp"

namespace model_attention_bench_gpu_test {

using namespace ktune;
using test::attention_problem;

TEST_CASE("cuda backend: eager attention is checked against the reference, then timed", "[gpu][model]") {
  test::skip_without_gpu();
  auto backend = tuner::exec::make_cuda_backend();
  tuner::RunOptions options;
  options.max_repetitions = 5;
  for (const auto& p :
       {attention_problem("f32", 2, 3, 257, 80, true), attention_problem("bf16", 2, 2, 100, 64, false),
        attention_problem("bf16", 8, 1, 4096, 128, true), attention_problem("f32", 8, 1, 4096, 16, false)})
    test::check_eager_attention(*backend, p, options, "cuBLASLt");
}

}  // namespace model_attention_bench_gpu_test
