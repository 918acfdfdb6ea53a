#include "model/memory_plan.hpp"

#include <catch2/catch.hpp>

#include <algorithm>

#include "base/error.hpp"
#include "model/flat_adamw.hpp"
#include "model/train.hpp"
#include "model/transformer.hpp"

namespace model_memory_plan_test {

using namespace ktune::model;

TEST_CASE("named configs match the seeds and bad ones are rejected", "[model][config]") {
  CHECK(model_config("small").parameter_count() == 128625408);
  CHECK(model_config("2.7B").d_ff == 10240);
  CHECK(model_config("xl").head_dim() == 64);
  CHECK(model_config("2.7B").head_dim() == 80);
  CHECK_THROWS_WITH(model_config("huge"), Catch::Contains("unknown model 'huge'") && Catch::Contains("small"));
  ModelConfig c = model_config("tiny");
  c.heads = 3;
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("must divide d_model"));
  c.heads = 32;  // head dim 2 is fine, 64/64 = 1 is odd
  CHECK_NOTHROW(c.validate());
  c.heads = 64;
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("even"));
}

TEST_CASE("a training step's FLOPs per token: 6 per matmul weight and attention's 12 L C S, as PaLM counts",
          "[model][config]") {
  // small: 12 blocks of 4 C^2 + 3 C F weights, the LM head's V C; attention at context 128.
  const double weights = 12.0 * (4.0 * 768 * 768 + 3.0 * 768 * 3072) + 10000.0 * 768;
  CHECK(model_config("small").train_flops_per_token(128) == 6 * weights + 12.0 * 12 * 768 * 128);
  // The matmul weights are the parameters less the embedding and the norms' gains.
  const ModelConfig xl = model_config("xl");
  const double xl_weights = static_cast<double>(xl.parameter_count()) - static_cast<double>(xl.vocab * xl.d_model) -
                            static_cast<double>((2 * xl.layers + 1) * xl.d_model);
  CHECK(xl.train_flops_per_token(1) == Approx(6 * xl_weights + 12.0 * xl.layers * xl.d_model).epsilon(1e-12));
}

TEST_CASE("the memory plan is what the cpu backend allocates", "[model][memory]") {
  const ModelConfig c = model_config("tiny");
  const RunShape shape{3, 16};
  Transformer<float> train(c, shape, Allocation::kTrain, 2);
  Transformer<float> infer(c, shape, Allocation::kForwardOnly, 2);
  const MemoryPlan p = plan_memory(c, shape, 2);
  CHECK(train.allocated_bytes() == p.peak_forward_backward());
  CHECK(infer.allocated_bytes() == p.peak_forward());
  ktune::test::FlatAdamW opt(train.layout().total, {});
  CHECK(train.allocated_bytes() + opt.state_bytes() == p.peak_step());
  CHECK(p.parameters == c.parameter_count() * 4);
  CHECK(p.optimizer_state == 2 * p.parameters);
}

TEST_CASE("memory plan of xl at ctx 256 has the expected magnitudes", "[model][memory]") {
  const MemoryPlan p = plan_memory(model_config("xl"), RunShape{4, 256}, 2);
  // 1.64e9 parameters (untied head): 6.6 GB each for params and grads.
  CHECK(p.parameters == model_config("xl").parameter_count() * 4);
  CHECK(p.parameters > 6'000'000'000LL);
  CHECK(p.activations_backward > 48 * p.per_layer_activations);
  CHECK(p.peak_step() == p.peak_forward_backward() + p.optimizer_state);
  CHECK(p.peak_forward() < p.peak_forward_backward());
  CHECK(format_bytes(3 * 1024 * 1024) == "3.0 MiB");
}

TEST_CASE("a run that does not fit in host memory is refused before allocating", "[model][memory]") {
  // xl at context 100000: the attention probabilities alone are terabytes.
  const ModelConfig xl = model_config("xl");
  const MemoryPlan p = plan_memory(xl, RunShape{4, 100000}, 1);
  try {
    require_host_memory(p, p.peak_step(), "training");
    FAIL("expected a refusal");
  } catch (const ktune::Error& e) {
    CHECK(e.kind() == ktune::ErrorKind::kInvalidInput);
    CHECK_THAT(e.what(), Catch::StartsWith("training model xl at context 100000, batch 4 needs ") &&
                             Catch::Contains(std::to_string(p.peak_step()) + " bytes") &&
                             Catch::Contains("available"));
  }
  TrainOptions t;
  t.model = xl;
  t.shape = RunShape{4, 100000};
  t.steps = 1;
  CHECK_THROWS_WITH(train(t), Catch::Contains("needs") && Catch::Contains("available"));
  CHECK_THROWS_WITH(evaluate(t, false), Catch::Contains("evaluating model xl"));
  const MemoryPlan tiny = plan_memory(model_config("tiny"), RunShape{4, 32}, 1);
  CHECK_NOTHROW(require_host_memory(tiny, tiny.peak_step(), "training"));
  // The advice: the first level of --recompute that brings the peak within what is there.
  const MemoryPlan keep = plan_memory(xl, RunShape{4, 512}, 1);
  const MemoryPlan swiglu = plan_memory(xl, RunShape{4, 512, 1, Recompute::kSwiglu}, 1);
  const MemoryPlan blocks = plan_memory(xl, RunShape{4, 512, 1, Recompute::kBlocks}, 1);
  const std::int64_t forty_gib = std::int64_t{40} << 30;
  REQUIRE(keep.peak_step() > forty_gib);
  REQUIRE(swiglu.peak_step() > forty_gib);
  REQUIRE(blocks.peak_step() <= forty_gib);
  CHECK(memory_remedy(keep, keep.peak_step(), forty_gib) ==
        "use --recompute (activations recomputed in the backward: " + format_bytes(blocks.peak_step()) +
            " at this peak), or a smaller model, context or batch");
  CHECK_THAT(memory_remedy(keep, keep.peak_step(), swiglu.peak_step()),
             Catch::StartsWith("use --recompute swiglu (") && Catch::Contains(format_bytes(swiglu.peak_step())));
  CHECK_THAT(memory_remedy(swiglu, swiglu.peak_step(), forty_gib), Catch::StartsWith("use --recompute ("));
  // Forward and backward without AdamW's state: the SwiGLU's share is enough.
  CHECK_THAT(memory_remedy(keep, keep.peak_forward_backward(), forty_gib),
             Catch::StartsWith("use --recompute swiglu (") &&
                 Catch::Contains(format_bytes(swiglu.peak_forward_backward())));
  CHECK(memory_remedy(keep, keep.peak_step(), blocks.peak_step() - 1) == "use a smaller model, context or batch");
  CHECK(memory_remedy(keep, keep.peak_forward(), forty_gib) == "use a smaller model, context or batch");
  CHECK(memory_remedy(blocks, blocks.peak_step(), forty_gib / 2) == "use a smaller model, context or batch");
  // Sizes whose byte counts would wrap std::int64_t are refused, not planned.
  ModelConfig huge = xl;
  huge.d_model = huge.heads = 1 << 30;
  huge.d_model *= 2;
  CHECK_THROWS_WITH(plan_memory(huge, RunShape{1 << 10, 1 << 20}, 1), Catch::Contains("2^60 bytes"));
  // Token counts that would wrap are refused before any byte is counted.
  CHECK_THROWS_WITH(plan_memory(xl, RunShape{1 << 20, 1 << 20}, 1), Catch::Contains("more than 2147483647 tokens"));
  RunShape many{1, 8};
  many.micro_batches = std::int64_t{1} << 61;
  CHECK_THROWS_WITH(many.validate(), Catch::Contains("each must be at most 2147483647"));
}

TEST_CASE("flash attention's plan keeps the (B, H, S) log-sum-exp instead of the probabilities", "[model][memory]") {
  const ModelConfig xl = model_config("xl");
  const RunShape shape{4, 256};
  const MemoryPlan materialised = plan_memory(xl, shape, 1);
  const MemoryPlan flash = plan_memory(xl, shape, 1, 4, AttentionSaved::kLogSumExp);
  CHECK(flash.attention == AttentionSaved::kLogSumExp);
  const std::int64_t saved_bytes = 4 * shape.batch * xl.heads * 256 * (256 - 1);  // per block
  CHECK(materialised.per_layer_activations - flash.per_layer_activations == saved_bytes);
  CHECK(materialised.activations_backward - flash.activations_backward == xl.layers * saved_bytes);
  CHECK(materialised.peak_step() - flash.peak_step() == xl.layers * saved_bytes);
  CHECK(flash.parameters == materialised.parameters);
  // The precision decides: flash attention in compiled tf32 and bf16, materialised otherwise.
  CHECK(attention_saved(Precision::kTf32, true) == AttentionSaved::kLogSumExp);
  CHECK(attention_saved(Precision::kBf16, true) == AttentionSaved::kLogSumExp);
  CHECK(attention_saved(Precision::kF32, true) == AttentionSaved::kProbabilities);
  CHECK(attention_saved(Precision::kTf32, false) == AttentionSaved::kProbabilities);
}

TEST_CASE("a bf16 plan: bf16 activations and weight copy, fp32 statistics, master weights and state",
          "[model][memory]") {
  const ModelConfig xl = model_config("xl");
  const RunShape shape{4, 256};
  const std::int64_t P = xl.parameter_count(), N = shape.tokens(), C = xl.d_model, F = xl.d_ff;
  const std::int64_t B = shape.batch, H = xl.heads, S = shape.context;
  const MemoryPlan f32 = plan_memory(xl, shape, 1, 4, AttentionSaved::kLogSumExp);
  const MemoryPlan bf16 = plan_memory(xl, shape, 1, 4, AttentionSaved::kLogSumExp, Precision::kBf16);
  CHECK(bf16.parameters == 4 * P);
  CHECK(bf16.weight_copy == 2 * P);
  CHECK(f32.weight_copy == 0);
  CHECK(bf16.gradients == 4 * P);
  CHECK(bf16.optimizer_state == 8 * P);
  // A block: x_in, ln1, q, k, v, attn, x_mid, ln2 (N, C) and a, b, h (N, F)
  // in bf16; rstd1, rstd2 (N,) and the lse (B, H, S) in fp32 (all multiples
  // of 16 elements here, so no alignment padding).
  CHECK(bf16.per_layer_activations == 2 * (8 * N * C + 3 * N * F) + 4 * (2 * N + B * H * S));
  CHECK(f32.per_layer_activations == 4 * (8 * N * C + 3 * N * F + 2 * N + B * H * S));
  // The head: x, ln (N, C) and the logits (N, V) bf16; rstd, losses, lse fp32.
  CHECK(bf16.activations_forward - bf16.per_layer_activations == 2 * (2 * N * C + N * xl.vocab) + 4 * 3 * N);
  CHECK(bf16.peak_step() == bf16.peak_forward_backward() + bf16.optimizer_state);
  CHECK(bf16.peak_forward_backward() ==
        bf16.parameters + bf16.weight_copy + bf16.gradients + bf16.inputs + bf16.activations_backward +
            bf16.workspace_backward);
  // About half the activations (the statistics stay fp32); the weight copy
  // costs more than that saves here (xl's 1.6e9 parameters at ctx 256).
  const double ratio = static_cast<double>(bf16.activations_backward) / f32.activations_backward;
  CHECK(ratio > 0.5);
  CHECK(ratio < 0.51);
  CHECK(bf16.peak_step() - f32.peak_step() ==
        bf16.weight_copy - (f32.activations_backward - bf16.activations_backward) -
            (f32.workspace_backward - bf16.workspace_backward));
  // The cpu backend's plans (element_bytes 8 for its fp64 checks) stay f32 only.
  CHECK_THROWS_AS(plan_memory(xl, shape, 1, 8, AttentionSaved::kProbabilities, Precision::kBf16), ktune::Error);
}

TEST_CASE("a bf16 layout's offsets are where its buffers lie: 2-byte units, two per fp32 element",
          "[model][memory]") {
  // An odd shape: every (N,) statistic is padded to 16 elements.
  ModelConfig c = model_config("tiny");
  const RunShape shape{1, 13};
  const std::int64_t N = shape.tokens(), C = c.d_model, F = c.d_ff;
  const auto padded = [](std::int64_t n) { return (n + 15) / 16 * 16; };
  CHECK(layout_unit_bytes(Precision::kBf16) == 2);
  CHECK(layout_unit_bytes(Precision::kTf32) == 4);
  const LayerLayout f32 = layer_layout(c, shape, AttentionSaved::kLogSumExp);
  const LayerLayout bf16 = layer_layout(c, shape, AttentionSaved::kLogSumExp, Precision::kBf16);
  // The f32 layout counts elements; the bf16 one the bytes it holds, halved.
  CHECK(f32.bf16_bytes == bf16.bf16_bytes);
  CHECK(bf16.size * 2 == bf16.bf16_bytes);
  CHECK(bf16.ln1 - bf16.x_in == padded(N * C));       // bf16 (N, C)
  CHECK(bf16.q - bf16.rstd1 == 2 * padded(N));        // fp32 (N,)
  CHECK(f32.q - f32.rstd1 == padded(N));
  CHECK(bf16.h - bf16.b == padded(N * F));
  const FinalLayout fin = final_layout(c, shape, Precision::kBf16);
  CHECK(fin.size * 2 == fin.bf16_bytes);
  CHECK(fin.lse - fin.losses == 2 * padded(N));
  const WorkspaceLayout work = workspace_layout(c, shape, 1, true, Precision::kBf16);
  CHECK(work.size * 2 == work.bf16_bytes);
  CHECK(work.rope_sin - work.rope_cos == 2 * padded(shape.context * c.head_dim() / 2));  // fp32 tables
  CHECK(work.dtmp - work.dx == padded(N * C));
  // The plan's bytes are these layouts' bytes.
  const MemoryPlan plan = plan_memory(c, shape, 1, 4, AttentionSaved::kLogSumExp, Precision::kBf16);
  CHECK(plan.per_layer_activations == bf16.size * 2);
  CHECK(plan.workspace_backward == work.size * 2);
}

TEST_CASE("q and k, and dq and dk, lie back to back where tokens * d_model keeps the alignment", "[model][memory]") {
  ModelConfig c = model_config("tiny");  // d_model 64: every buffer's size a multiple of the alignment
  for (const Precision p : {Precision::kF32, Precision::kBf16}) {
    INFO(to_string(p));
    const RunShape shape{1, 13};
    CHECK(rope_pairs_adjacent(c, shape, p, AttentionSaved::kLogSumExp));
    const LayerLayout l = layer_layout(c, shape, AttentionSaved::kLogSumExp, p);
    CHECK(l.k - l.q == shape.tokens() * c.d_model);
  }
  c.d_model = 60;  // 3 heads of 20: 13 tokens of 60 leave k padded away from q
  c.heads = 3;
  CHECK_FALSE(rope_pairs_adjacent(c, RunShape{1, 13}, Precision::kF32, AttentionSaved::kProbabilities));
  CHECK(rope_pairs_adjacent(c, RunShape{4, 16}, Precision::kF32, AttentionSaved::kProbabilities));
}

}  // namespace model_memory_plan_test

namespace model_memory_plan_test {

TEST_CASE("a device backend's plan keeps none of the cpu backend's per-thread or per-chunk scratch",
          "[model][memory]") {
  const ModelConfig m = model_config("tiny");
  const RunShape shape{2, 32};
  const MemoryPlan cpu = plan_memory(m, shape, 1, 4, AttentionSaved::kLogSumExp);
  const MemoryPlan device = plan_memory(m, shape, plan_threads("cuda", 1), 4, AttentionSaved::kLogSumExp);
  // One thread's block of 32 query rows over 32 keys, and the RMSNorm weight gradients' partials, fp32.
  CHECK(device.workspace_backward == cpu.workspace_backward - 32 * 32 * 4 - kNormDwChunks * m.d_model * 4);
  for (const auto& b : plan_buffers(device)) CHECK_FALSE((b.name == "attn_scratch" || b.name == "norm_dw"));
}

TEST_CASE("the plan's buffers, listed one by one, add up to the full step's peak, each in its dtype",
          "[model][memory]") {
  // An odd shape (tokens not a multiple of the alignment), recomputation at every level, micro-batches,
  // f32 with 4- and 8-byte values, bf16 with flash attention's log-sum-exp and with the probabilities; the cpu
  // backend's plan (2 threads) and a device's (0: its ops' scratch, the probabilities' dS).
  ModelConfig m = model_config("tiny");
  m.layers = 3;
  for (const Recompute recompute : {Recompute::kNone, Recompute::kSwiglu, Recompute::kBlocks}) {
    for (const auto& [micro_batches, threads] : {std::pair<std::int64_t, unsigned>{1, 2}, {3, 2}, {1, 0}, {3, 0}}) {
      const RunShape shape{3, 13, micro_batches, recompute};
      struct Variant {
        std::int64_t element_bytes;
        AttentionSaved attention;
        Precision precision;
      };
      for (const Variant v : {Variant{4, AttentionSaved::kProbabilities, Precision::kF32},
                              Variant{8, AttentionSaved::kProbabilities, Precision::kF32},
                              Variant{4, AttentionSaved::kLogSumExp, Precision::kBf16},
                              Variant{4, AttentionSaved::kProbabilities, Precision::kBf16}}) {
        const MemoryPlan plan = plan_memory(m, shape, threads, v.element_bytes, v.attention, v.precision);
        INFO("recompute " << to_string(recompute) << ", " << micro_batches << " micro-batches, "
                          << v.element_bytes << "-byte values, " << to_string(v.precision) << ", " << threads
                          << " threads");
        CHECK((plan.scratch > 0) == (threads == 0 && v.attention == AttentionSaved::kProbabilities));
        const auto rows = plan_buffers(plan);
        std::int64_t total = 0, kept_per_block = 0;
        for (const auto& b : rows) {
          total += b.bytes();
          if (b.phase == "activations, per block" && b.count == m.layers) kept_per_block += b.each;
        }
        CHECK(total == plan.peak_step());
        CHECK(kept_per_block == plan.per_layer_kept);
        for (const auto& b : rows) {
          INFO(b.phase << " " << b.name);
          std::int64_t elements = 1;
          for (const auto d : b.shape) elements *= d;
          const std::int64_t value_bytes = b.dtype == "bf16" ? 2 : b.dtype == "f64" ? 8 : 4;
          CHECK(b.each >= elements * value_bytes);        // laid out whole,
          CHECK(b.each < (elements + 16) * value_bytes);  // padded to at most the alignment
          if (b.phase == "parameters") CHECK(b.count == (b.name.rfind("layers.*.", 0) == 0 ? m.layers : 1));
          const bool statistic = b.name.rfind("rstd", 0) == 0 || b.name == "lse" || b.name == "losses" ||
                                 b.name.rfind("rope", 0) == 0 || b.name == "attn_scratch" || b.name == "norm_dw" ||
                                 b.name == "dparam" ||
                                 (b.name == "attn_saved" && v.attention == AttentionSaved::kLogSumExp);
          const bool activation = b.phase.rfind("activations", 0) == 0 || b.phase == "workspace";
          if (v.precision == Precision::kBf16 && activation) CHECK(b.dtype == (statistic ? "f32" : "bf16"));
          if (v.precision == Precision::kF32 && b.phase != "inputs")
            CHECK(b.dtype == (v.element_bytes == 8 ? "f64" : "f32"));
        }
        const bool bf16 = v.precision == Precision::kBf16;
        const auto rows_where = [&](auto&& pred) { return std::count_if(rows.begin(), rows.end(), pred); };
        CHECK(rows_where([](const BufferRow& b) { return b.phase == "bf16 weight copy"; }) == (bf16 ? 1 : 0));
        CHECK(rows_where([](const BufferRow& b) { return b.name == "dparam"; }) == (micro_batches > 1 ? 1 : 0));
      }
    }
  }
}

}  // namespace model_memory_plan_test
