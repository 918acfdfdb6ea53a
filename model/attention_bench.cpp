#include "model/attention_bench.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "model/ops/device_ops.hpp"
#include "templates/attention/attention.hpp"

namespace ktune::model {

namespace {

namespace at = templates::attention;

const templates::HostBuffer& buffer(const templates::Workload& w, const std::string& name) {
  for (const auto& b : w.buffers)
    if (b.name == name) return b;
  throw_error(ErrorKind::kInternal, "attention workload without buffer " + name);
}

}  // namespace

bool eager_attention_supports(const templates::Problem& problem) {
  const bool grouped = problem.dims.count("kv_heads") && problem.dim("kv_heads") != problem.dim("heads");
  return (problem.dtype == "f32" || problem.dtype == "bf16") && !grouped;
}

EagerAttentionResult bench_eager_attention(tuner::exec::Backend& backend, const templates::Problem& problem,
                                           const tuner::RunOptions& options, std::uint64_t seed) {
  at::forward_family().check_problem(problem);
  KTUNE_REQUIRE(eager_attention_supports(problem),
                fmt::format("eager attention runs f32 and bf16 with a K/V head per query head, not {}",
                            problem.key()));
  const at::AttentionShape s{problem.dim("batch"), problem.dim("seq"), problem.dim("heads"), problem.dim("head_dim"),
                             problem.dim("causal") != 0};
  // The one-layer model whose attention op this is; its other sizes are the smallest valid.
  ModelConfig config;
  config.name = "attention";
  config.vocab = 2;
  config.d_model = s.heads * s.head_dim;
  config.d_ff = 2;
  config.layers = 1;
  config.heads = s.heads;
  const RunShape shape{s.batch, s.seq};
  DeviceOptions device_options;
  device_options.mode = Mode::kEager;
  device_options.precision = problem.dtype == "bf16" ? Precision::kBf16 : Precision::kF32;
  const StepLayout L = device_layout(config, shape, Allocation::kTrain, device_options);
  DeviceOps ops(backend, L, device_options);
  ops.poison();

  const Ref q = L.act(0, L.layer.q), k = L.act(0, L.layer.k), v = L.act(0, L.layer.v), o = L.act(0, L.layer.attn);
  const Ref saved = L.act(0, L.layer.attn_saved);
  const Ref dout{Region::kWork, L.work.dbranch};
  const Ref dq{Region::kWork, L.work.dq}, dk{Region::kWork, L.work.dk}, dv{Region::kWork, L.work.dv};
  const std::int64_t row = s.heads * s.head_dim;  // q, k, v apart, as eager mode keeps them
  const auto upload = [&](Ref at_ref, const templates::HostBuffer& b) {
    ops.upload(at_ref, b.bytes.data(), b.bytes.size());
  };
  // What a timed run starts from: at large shapes q and dO as drawn, where the check's sample left zeros.
  const auto upload_timed = [&](Ref at_ref, const templates::HostBuffer& b) {
    ops.upload(at_ref, b.timed_bytes().data(), b.bytes.size());
  };
  const auto check = [&](Ref at_ref, const templates::HostBuffer& b) {
    std::vector<std::byte> got(b.expected.size());
    ops.download(got.data(), at_ref, got.size());
    return templates::require_match(b, got, "eager attention " + problem.key());
  };

  EagerAttentionResult r;
  r.gemms = ops.gemm_engine().name();
  {  // Forward: O against the forward family's workload.
    const auto w = at::forward_family().make_workload(problem, seed);
    upload(q, buffer(w, "q"));
    upload(k, buffer(w, "k"));
    upload(v, buffer(w, "v"));
    ops.attention_forward(q, k, v, saved, o, s, row);
    backend.synchronize();
    r.o_error = check(o, buffer(w, "o"));
    upload_timed(q, buffer(w, "q"));
    r.forward = backend.time([&] { ops.attention_forward(q, k, v, saved, o, s, row); }, options,
                             "eager attention forward " + problem.key());
    // In place, over the probabilities the forward left: the same launch, the same work.
    r.softmax = backend.time([&] { ops.attention_softmax(saved, s); }, options,
                             "eager attention softmax " + problem.key());
  }
  {  // Backward: the probabilities of its own forward, then dQ, dK, dV against the backward family's workload.
    const auto w = at::backward_family().make_workload(problem, seed);
    upload(q, buffer(w, "q"));
    upload(k, buffer(w, "k"));
    upload(v, buffer(w, "v"));
    upload(dout, buffer(w, "do"));
    ops.attention_forward(q, k, v, saved, o, s, row);
    ops.attention_backward(q, k, v, o, saved, dout, dq, dk, dv, s, row);
    backend.synchronize();
    r.dq_error = check(dq, buffer(w, "dq"));
    r.dk_error = check(dk, buffer(w, "dk"));
    r.dv_error = check(dv, buffer(w, "dv"));
    upload_timed(q, buffer(w, "q"));
    upload_timed(dout, buffer(w, "do"));
    ops.attention_forward(q, k, v, saved, o, s, row);  // the probabilities and O of the timed inputs
    r.backward = backend.time([&] { ops.attention_backward(q, k, v, o, saved, dout, dq, dk, dv, s, row); }, options,
                              "eager attention backward " + problem.key());
  }
  const double element_bytes = problem.dtype == "bf16" ? 2 : 4;
  const double tensor = static_cast<double>(s.batch * s.seq * s.heads * s.head_dim);
  const double probabilities = static_cast<double>(s.batch * s.heads * s.seq * s.seq);
  r.memory_after_forward_bytes = (4 * tensor + probabilities) * element_bytes;
  return r;
}

}  // namespace ktune::model
