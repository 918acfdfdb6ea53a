// RAII owners of driver objects (STYLE.md habit 6) and the device's
// properties. Every call goes through KT_CHECK_CU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "templates/family.hpp"
#include "tuner/cuda/driver.hpp"

namespace ktune::tuner {

/// What `ktune devices` prints and what the tuned cache keys on.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  /// "GPU-" and the 32 hex digits CUDA reports (a MIG instance's own, on one), in nvidia-smi's groups; empty
  /// where the driver cannot say
  std::string uuid;
  int major = 0, minor = 0;
  std::size_t memory_bytes = 0;
  int sm_count = 0;
  long long l2_bytes = 0;
  int clock_khz = 0;
  int memory_clock_khz = 0;
  int memory_bus_bits = 0;
  int max_threads_per_block = 0;
  int max_smem_per_block_optin = 0;
  int driver_version = 0;

  std::string arch() const;                 ///< "sm_90"
  double peak_bandwidth_gbs() const;        ///< from the memory clock and bus width
  templates::DeviceLimits limits() const;   ///< the profile with this device's numbers
  nlohmann::json to_json() const;
};

/// Every visible device; throws Error(kNoDevice) when there is none.
std::vector<DeviceInfo> list_devices();

/// The primary context of one device, current on the calling thread while
/// the object lives.
class Context {
 public:
  explicit Context(int ordinal = 0);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  const DeviceInfo& info() const { return info_; }
  /// Makes the context current on the calling thread (a thread other than
  /// the constructing one that launches, allocates or loads through it).
  void make_current() const;

 private:
  CUdevice device_{};
  CUcontext context_{};
  DeviceInfo info_;
};

/// Device memory of a fixed size.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::uint64_t address() const { return static_cast<std::uint64_t>(ptr_); }
  std::size_t bytes() const { return bytes_; }
  /// Complete on return (ordered before anything launched afterwards on any stream).
  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes) const;

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream get() const { return stream_; }
  void synchronize() const;

 private:
  CUstream stream_{};
};

class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(CUstream stream);
  /// Milliseconds from `start` to this event; both must have completed.
  float elapsed_since(const Event& start) const;

 private:
  CUevent event_{};
};

/// A loaded cubin and its kernels, looked up by lowered name.
class Module {
 public:
  explicit Module(const std::string& cubin);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  CUfunction function(const std::string& lowered_name) const;
  /// The address and bytes of the module's global variable `name` (a
  /// `__constant__` in the global namespace); kInvalidInput where it has none.
  std::pair<CUdeviceptr, std::size_t> global(const std::string& name) const;

 private:
  CUmodule module_{};
};

}  // namespace ktune::tuner
