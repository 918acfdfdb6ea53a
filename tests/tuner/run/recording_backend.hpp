// The emulation backend, recording what a runner asks of it: for each plan
// launched, whether it ran inside time() and how many copies into constant
// memory it carried; the device-to-device copies; and, after each timed
// launch, a hook that may read the buffers (found by label).
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tuner/exec/backend.hpp"

namespace ktune::test {

class RecordingBackend final : public tuner::exec::Backend {
 public:
  struct Launched {
    bool timed = false;
    std::size_t constant_copies = 0;
  };
  std::vector<Launched> launches;
  int copies = 0;
  std::function<void(RecordingBackend&)> after_timed_launch;

  RecordingBackend() : inner_(tuner::exec::make_emu_backend()) {}
  /// The live buffer allocated under `label` (the workload's buffer names).
  const tuner::exec::Buffer& buffer(const std::string& label) const { return *buffers_.at(label); }

  std::string name() const override { return inner_->name(); }
  const DeviceLimits& device() const override { return inner_->device(); }
  std::unique_ptr<tuner::exec::Buffer> allocate(std::size_t bytes, const std::string& label) override {
    auto b = inner_->allocate(bytes, label);
    buffers_[label] = b.get();
    return b;
  }
  void upload(const tuner::exec::Buffer& dst, const void* host, std::size_t bytes) override {
    inner_->upload(dst, host, bytes);
  }
  void download(void* host, const tuner::exec::Buffer& src, std::size_t bytes) override {
    inner_->download(host, src, bytes);
  }
  void poison(const tuner::exec::Buffer& dst) override { inner_->poison(dst); }
  void upload_range(const tuner::exec::Buffer& dst, std::size_t offset, const void* host, std::size_t bytes) override {
    inner_->upload_range(dst, offset, host, bytes);
  }
  void download_range(void* host, const tuner::exec::Buffer& src, std::size_t offset, std::size_t bytes) override {
    inner_->download_range(host, src, offset, bytes);
  }
  void copy(const tuner::exec::Buffer& dst, const tuner::exec::Buffer& src, std::size_t bytes) override {
    ++copies;
    inner_->copy(dst, src, bytes);
  }
  std::shared_ptr<const tuner::exec::Module> load(const templates::Rendered& rendered) override {
    return inner_->load(rendered);
  }
  void precompile(const std::vector<templates::Rendered>& sources, unsigned threads) override {
    inner_->precompile(sources, threads);
  }
  using Backend::launch;
  void launch(const tuner::exec::Module& module, const std::vector<templates::Launch>& plan,
              std::uint64_t stream) override {
    Launched l{timing_, 0};
    for (const auto& launch : plan) l.constant_copies += launch.constants.size();
    launches.push_back(l);
    inner_->launch(module, plan, stream);
    if (timing_ && after_timed_launch) after_timed_launch(*this);
  }
  void synchronize() override { inner_->synchronize(); }
  std::unique_ptr<tuner::exec::Graph> capture(const std::function<void()>& enqueue) override {
    return inner_->capture(enqueue);
  }
  void replay(const tuner::exec::Graph& graph) override { inner_->replay(graph); }
  using Backend::time;
  tuner::Measurement time(const std::function<void()>& enqueue, const tuner::RunOptions& options,
                          const std::string& what, const std::function<void()>& reset) override {
    timing_ = true;
    auto m = inner_->time(enqueue, options, what, reset);
    timing_ = false;
    return m;
  }

 private:
  std::unique_ptr<tuner::exec::Backend> inner_;
  std::map<std::string, const tuner::exec::Buffer*> buffers_;
  bool timing_ = false;
};

}  // namespace ktune::test
