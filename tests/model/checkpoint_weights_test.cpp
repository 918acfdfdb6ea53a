// A checkpoint read by the runs that start from it without resuming it
// (`--weights` of eval, generate, a fresh train), and the token stream's
// fingerprint a resumed run checks: damaged files are refused, the same ids
// in another integer width are not.
#include <catch2/catch.hpp>
#include <cstring>
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/files.hpp"
#include "base/safetensors.hpp"
#include "model/checkpoint.hpp"
#include "model/data.hpp"
#include "model/tiny_run.hpp"
#include "model/train.hpp"
#include "model/weights.hpp"
#include "support.hpp"

namespace model_checkpoint_weights_test {

using namespace ktune;
using namespace ktune::model;

namespace {

// Every value of tensor `name` in `file` times `factor`: weights still finite, and wrong.
void scale(TensorFile& file, const std::string& name, float factor) {
  std::string& bytes = file.tensors.at(name).bytes;
  for (std::size_t i = 0; i + sizeof(float) <= bytes.size(); i += sizeof(float)) {
    float v = 0;
    std::memcpy(&v, bytes.data() + i, sizeof v);
    v *= factor;
    std::memcpy(bytes.data() + i, &v, sizeof v);
  }
}

// `ids` as a .npy array of little-endian int64, as np.save(path, ids.astype(np.int64)) writes it.
std::filesystem::path int64_npy(const std::filesystem::path& path, const std::vector<std::uint16_t>& ids) {
  std::string header = fmt::format("{{'descr': '<i8', 'fortran_order': False, 'shape': ({},), }}", ids.size());
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01") + '\0';
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  for (const std::uint16_t id : ids) {
    const std::int64_t v = id;
    bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  write_file_atomic(path, bytes);
  return path;
}

std::vector<std::uint16_t> some_ids(std::size_t n, std::size_t shift = 5) {
  std::vector<std::uint16_t> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<std::uint16_t>((i * 31 + shift) % 128);
  return ids;
}

}  // namespace

TEST_CASE("a damaged checkpoint given as --weights is refused by eval, generate and a fresh train, as --resume "
          "refuses it, while a weights file and an intact checkpoint are read",
          "[model][checkpoint]") {
  const auto dir = test::scratch_dir("checkpoint-weights");
  TrainOptions o = test::tiny_run(2, 7);
  o.checkpoint = (dir / "c.ckpt").string();
  o.save = (dir / "w.safetensors").string();
  train(o);

  const TensorFile file = read_safetensors(o.checkpoint);
  TensorFile flipped = file;  // values a thousand times theirs, under the hash the file was written with
  scale(flipped, "lm_head.weight", 1000.0f);
  const std::string damaged = (dir / "flip.ckpt").string();
  write_safetensors(damaged, flipped);
  const std::string message = damaged +
                              " is damaged: its tensors are not the bytes it was written with (a disk or a copy "
                              "changed them); use an earlier checkpoint, or the --save file of the run";

  RunOptions run = test::tiny_run(1, 7);
  run.weights = damaged;
  CHECK_THROWS_WITH(evaluate(run, false), message);
  CHECK_THROWS_WITH(evaluate(run, true), message);
  GenerateOptions gen;
  static_cast<RunOptions&>(gen) = run;
  gen.prompt = {1, 2, 3};
  gen.max_tokens = 2;
  CHECK_THROWS_WITH(generate(gen), message);
  TrainOptions fresh = test::tiny_run(1, 7);
  fresh.weights = damaged;
  CHECK_THROWS_WITH(train(fresh), message);
  // The one line's kind is bad input (exit 2).
  try {
    evaluate(run, false);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kInvalidInput);
  }
  // Its optimizer state damaged, or a tensor of it gone: the file is not what was written either.
  TensorFile moments = file;
  scale(moments, "optimizer.exp_avg.lm_head.weight", 2.0f);
  write_safetensors(dir / "moments.ckpt", moments);
  run.weights = (dir / "moments.ckpt").string();
  CHECK_THROWS_WITH(evaluate(run, false), Catch::Contains("moments.ckpt is damaged: its tensors"));
  TensorFile missing = file;
  missing.tensors.erase("optimizer.exp_avg_sq.ln_final.weight");
  std::erase(missing.order, "optimizer.exp_avg_sq.ln_final.weight");
  write_safetensors(dir / "missing.ckpt", missing);
  run.weights = (dir / "missing.ckpt").string();
  CHECK_THROWS_WITH(evaluate(run, false), Catch::Contains("missing.ckpt is damaged: its tensors"));
  // A digit of its metadata changed (the seed eval reads its batches with).
  TensorFile edited = file;
  edited.metadata.at("seed") = "8";
  write_safetensors(dir / "edited.ckpt", edited);
  run.weights = (dir / "edited.ckpt").string();
  CHECK_THROWS_WITH(evaluate(run, false), Catch::Contains("edited.ckpt is damaged: its metadata is not what it was "
                                                          "written with"));

  // The checkpoint as written, a plain weights file (no hash), and such a file with its values changed, are read.
  run.weights = o.checkpoint;
  const double loss = evaluate(run, false).loss;
  run.weights = o.save;
  CHECK(evaluate(run, false).loss == loss);
  TensorFile plain = read_safetensors(o.save);
  scale(plain, "lm_head.weight", 1000.0f);
  write_safetensors(dir / "scaled.safetensors", plain);
  run.weights = (dir / "scaled.safetensors").string();
  CHECK(evaluate(run, false).loss != loss);
  // A checkpoint written before its hashes were has nothing to check.
  TensorFile old = flipped;
  old.metadata.erase("data_hash");
  old.metadata.erase("metadata_hash");
  write_safetensors(dir / "old.ckpt", old);
  run.weights = (dir / "old.ckpt").string();
  CHECK_NOTHROW(evaluate(run, false));
}

TEST_CASE("a token stream's fingerprint is of its ids: a raw uint16 file and a .npy of int64 of the same ids match",
          "[model][checkpoint][data]") {
  const auto dir = test::scratch_dir("fingerprint-ids");
  const auto ids = some_ids(500);
  const auto raw = test::write_tokens(dir / "t.u16", ids);
  const auto npy = int64_npy(dir / "t64.npy", ids);
  const TokenStream a = TokenStream::from_file(raw, 128), b = TokenStream::from_file(npy, 128);
  CHECK(a.fingerprint() == b.fingerprint());
  CHECK(a.bytes_fingerprint() != b.bytes_fingerprint());  // what checkpoints recorded before
  CHECK(a.slice(10, 400).fingerprint() == b.slice(10, 400).fingerprint());
  CHECK(a.slice(10, 400).fingerprint() != a.slice(11, 401).fingerprint());
  auto other = ids;
  other[250] = static_cast<std::uint16_t>((other[250] + 1) % 128);
  CHECK(TokenStream::from_file(test::write_tokens(dir / "o.u16", other), 128).fingerprint() != a.fingerprint());
}

TEST_CASE("a run resumes on the same token ids stored at another integer width, and a checkpoint that recorded "
          "their bytes resumes on those bytes and says why it refuses others",
          "[model][checkpoint]") {
  const auto dir = test::scratch_dir("resume-ids");
  const auto ids = some_ids(600);
  const std::string raw = test::write_tokens(dir / "t.u16", ids).string();
  const std::string npy = int64_npy(dir / "t64.npy", ids).string();

  // The uninterrupted run, on the raw file.
  TrainOptions whole = test::tiny_run(4, 7);
  whole.tokens_file = raw;
  whole.save = (dir / "whole.safetensors").string();
  train(whole);

  // Two steps on the raw file, then two more on the .npy of int64: the same run, to the bit.
  TrainOptions part = test::tiny_run(2, 7);
  part.tokens_file = raw;
  part.checkpoint = (dir / "run.ckpt").string();
  part.resume = true;
  train(part);
  const TensorFile two_steps = read_safetensors(part.checkpoint);
  part.steps = 4;
  part.tokens_file = npy;
  part.save = (dir / "resumed.safetensors").string();
  REQUIRE(train(part).size() == 2);
  const TensorFile resumed = read_safetensors(part.save), uninterrupted = read_safetensors(whole.save);
  for (const auto& [name, tensor] : uninterrupted.tensors) {
    INFO(name);
    CHECK(resumed.tensors.at(name).bytes == tensor.bytes);
  }
  // Other ids at that width are still refused.
  part.checkpoint = (dir / "again.ckpt").string();
  write_safetensors(part.checkpoint, two_steps);
  part.tokens_file = int64_npy(dir / "other.npy", some_ids(600, 6)).string();
  CHECK_THROWS_WITH(train(part), Catch::Contains("was trained on as many tokens as ") &&
                                     Catch::Contains("other.npy (600 tokens) holds, but other ones: resume it on the "
                                                     "same tokens"));

  // A checkpoint written when the stream's hash was of its bytes: the raw file resumes, the int64 .npy is
  // refused, saying that the checkpoint cannot tell the ids.
  TensorFile old = two_steps;
  old.metadata.erase("metadata_hash");
  old.metadata.erase("tokens_ids_hash");
  old.metadata["tokens_hash"] = TokenStream::from_file(raw, 128).bytes_fingerprint();
  part.checkpoint = (dir / "old.ckpt").string();
  write_safetensors(part.checkpoint, old);
  part.tokens_file = npy;
  CHECK_THROWS_WITH(train(part), Catch::Contains("but other ones, or the same ones stored otherwise (it records the "
                                                 "bytes that stored them, not the ids): resume it on the file it was "
                                                 "trained on"));
  part.tokens_file = raw;
  CHECK(train(part).size() == 2);
}

}  // namespace model_checkpoint_weights_test
