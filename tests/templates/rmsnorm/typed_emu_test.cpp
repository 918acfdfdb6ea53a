// RMSNorm run through its typed run-time face, emulated, as a runtime calls
// it: named arguments on buffers laid out by the caller (not in the
// workload's order), a workspace of exactly workspace_bytes, results against
// the CPU reference.
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>

#include "templates/rmsnorm/rmsnorm.hpp"
#include "tuner/emu_launch.hpp"

namespace templates_rmsnorm_typed_emu_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::rmsnorm;

namespace {

/// One caller-owned allocation holding named buffers at 16-byte aligned
/// offsets, in the order they are added, with a poisoned gap between them.
class Arena {
 public:
  static constexpr std::size_t kGap = 48;

  /// Reserves `bytes` for `name`; returns its offset.
  std::size_t add(const std::string& name, std::size_t bytes) {
    const std::size_t offset = end_;
    parts_.push_back({name, offset, bytes});
    end_ = (offset + bytes + kGap + 15) / 16 * 16;
    return offset;
  }
  void allocate() {
    memory_ = std::make_unique<tuner::emu::GuardedBuffer>("arena", end_);
    memory_->fill(0xff);
  }
  std::uint64_t address(const std::string& name) const {
    return reinterpret_cast<std::uint64_t>(memory_->data() + part(name).offset);
  }
  void write(const std::string& name, const std::vector<std::byte>& bytes) {
    REQUIRE(bytes.size() == part(name).bytes);
    std::memcpy(memory_->data() + part(name).offset, bytes.data(), bytes.size());
  }
  std::vector<std::byte> read(const std::string& name) const {
    const auto* p = memory_->data() + part(name).offset;
    return {p, p + part(name).bytes};
  }
  /// Whether every byte outside the named buffers still holds the poison.
  bool gaps_untouched() const {
    std::size_t at = 0;
    for (const auto& p : parts_) {
      for (; at < p.offset; ++at)
        if (memory_->data()[at] != std::byte{0xff}) return false;
      at = p.offset + p.bytes;
    }
    for (; at < end_; ++at)
      if (memory_->data()[at] != std::byte{0xff}) return false;
    return true;
  }
  std::unique_ptr<tuner::emu::GuardedBuffer>& memory() { return memory_; }

 private:
  struct Part {
    std::string name;
    std::size_t offset, bytes;
  };
  const Part& part(const std::string& name) const {
    for (const auto& p : parts_)
      if (p.name == name) return p;
    FAIL("no buffer " << name);
    throw;
  }
  std::vector<Part> parts_;
  std::size_t end_ = 0;
  std::unique_ptr<tuner::emu::GuardedBuffer> memory_;
};

const HostBuffer& buffer(const Workload& w, const std::string& name) {
  for (const auto& b : w.buffers)
    if (b.name == name) return b;
  FAIL("no buffer " << name);
  throw;
}

void check_matches(const Arena& arena, const Workload& w, const std::string& name) {
  const HostBuffer& expected = buffer(w, name);
  const double error = relative_l2(expected.dtype, arena.read(name), expected.expected);
  INFO(name << " error " << error);
  CHECK(error < expected.tolerance);
}

}  // namespace

TEST_CASE("rmsnorm_fwd through the typed API on a caller's layout matches the reference", "[rmsnorm][typed][emu]") {
  const auto& f = forward_family();
  for (const Problem& p : {Problem{"bf16", {{"rows", 37}, {"dim", 1000}}}, Problem{"f32", {{"rows", 5}, {"dim", 256}}}})
    for (const Config& c : {f.default_config(p), Config({{"threads", 128}, {"row_threads", 32}, {"vec", 4}})}) {
      INFO(p.key() << " " << c.str());
      REQUIRE(f.is_valid(c, p, tuner::EmuRunner().device()));
      const Workload w = f.make_workload(p, 17);
      // Outputs first, then the inputs in reverse: nothing like the workload's x, w, y, rstd.
      Arena arena;
      for (const char* name : {"rstd", "y", "w", "x"}) arena.add(name, buffer(w, name).bytes.size());
      arena.allocate();
      arena.write("x", buffer(w, "x").bytes);
      arena.write("w", buffer(w, "w").bytes);

      auto launches = f.plan(c, p,
                             {.x = arena.address("x"), .w = arena.address("w"), .y = arena.address("y"),
                              .rstd = arena.address("rstd")},
                             tuner::EmuRunner().device());
      std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>> memory;
      memory.push_back(std::move(arena.memory()));
      test::run_emulated(*tuner::emu::load_module(f.render(c, p)), launches, memory, 2);
      arena.memory() = std::move(memory.front());

      check_matches(arena, w, "y");
      check_matches(arena, w, "rstd");
      CHECK(arena.gaps_untouched());
    }
}

TEST_CASE("rmsnorm_bwd through the typed API fits its partial dw rows in workspace_bytes", "[rmsnorm][typed][emu]") {
  const auto& f = backward_family();
  const Problem p{"bf16", {{"rows", 37}, {"dim", 1000}}};
  for (const Config& c : {f.default_config(p), Config({{"threads", 128}, {"row_threads", 32}, {"vec", 4},
                                                        {"blocks", 64}, {"prefetch", 1}})}) {
    INFO(c.str());
    const Workload w = f.make_workload(p, 23);
    Arena arena;
    for (const char* name : {"dw", "dx", "dy", "rstd", "w", "x"}) arena.add(name, buffer(w, name).bytes.size());
    arena.allocate();
    for (const char* name : {"x", "w", "rstd", "dy"}) arena.write(name, buffer(w, name).bytes);
    // The workspace alone in its own guarded mapping, exactly as large as
    // asked for: a partial row past its end faults or spoils the canary.
    auto workspace = std::make_unique<tuner::emu::GuardedBuffer>("workspace", f.workspace_bytes(c, p));
    workspace->fill(0xff);

    auto launches = f.plan(c, p,
                           {.x = arena.address("x"), .w = arena.address("w"), .rstd = arena.address("rstd"),
                            .dy = arena.address("dy"), .dx = arena.address("dx"), .dw = arena.address("dw"),
                            .workspace = reinterpret_cast<std::uint64_t>(workspace->data())},
                           tuner::EmuRunner().device());
    std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>> memory;
    memory.push_back(std::move(arena.memory()));
    memory.push_back(std::move(workspace));
    test::run_emulated(*tuner::emu::load_module(f.render(c, p)), launches, memory, 2);
    CHECK(memory[1]->check_canary().empty());
    arena.memory() = std::move(memory.front());

    check_matches(arena, w, "dx");
    check_matches(arena, w, "dw");
    CHECK(arena.gaps_untouched());
  }
}

}  // namespace templates_rmsnorm_typed_emu_test
