#include "tuner/cuda/device.hpp"

#include <fmt/format.h>

#include "tuner/cuda/check.hpp"

namespace ktune::tuner {

std::string DeviceInfo::arch() const { return fmt::format("sm_{}{}", major, minor); }

double DeviceInfo::peak_bandwidth_gbs() const {
  // Double data rate: two transfers per memory clock.
  return 2.0 * memory_clock_khz * 1e3 * (memory_bus_bits / 8.0) / 1e9;
}

templates::DeviceLimits DeviceInfo::limits() const {
  templates::DeviceLimits d;
  try {
    d = templates::DeviceLimits::for_arch(arch());
  } catch (const Error&) {
    d.arch = arch();  // a newer GPU: keep the sm_90 profile's per-SM numbers
  }
  d.name = name;
  d.driver_version = driver_version;
  d.peak_bandwidth_gbs = peak_bandwidth_gbs();
  d.sm = major * 10 + minor;
  d.sm_count = sm_count;
  d.l2_bytes = l2_bytes;
  d.max_threads_per_block = max_threads_per_block;
  if (max_smem_per_block_optin > 0) d.max_smem_per_block = max_smem_per_block_optin;
  return d;
}

nlohmann::json DeviceInfo::to_json() const {
  return {{"ordinal", ordinal},
          {"name", name},
          {"uuid", uuid},
          {"arch", arch()},
          {"memory_bytes", memory_bytes},
          {"sm_count", sm_count},
          {"l2_bytes", l2_bytes},
          {"clock_mhz", clock_khz / 1000},
          {"memory_clock_mhz", memory_clock_khz / 1000},
          {"memory_bus_bits", memory_bus_bits},
          {"peak_bandwidth_gbs", peak_bandwidth_gbs()},
          {"driver_version", driver_version}};
}

namespace {
DeviceInfo query(const Driver& d, int ordinal) {
  DeviceInfo info;
  info.ordinal = ordinal;
  info.driver_version = d.version;
  CUdevice dev{};
  KT_CHECK_CU(d.cuDeviceGet(&dev, ordinal));
  char name[256] = {};
  KT_CHECK_CU(d.cuDeviceGetName(name, sizeof name, dev));
  info.name = name;
  // Only the GPU marks need it (tuner/cuda/gpu_marks.hpp): a driver that cannot say leaves it empty, and no mark.
  if (CUuuid id{}; d.cuDeviceGetUuid(&id, dev) == CUDA_SUCCESS) {
    info.uuid = "GPU-";
    for (int i = 0; i < 16; ++i)
      info.uuid += fmt::format("{}{:02x}", i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "",
                               static_cast<unsigned char>(id.bytes[i]));
  }
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    KT_CHECK_CU(d.cuDeviceGetAttribute(&v, a, dev));
    return v;
  };
  info.major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  info.minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  info.clock_khz = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  info.memory_clock_khz = attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
  info.memory_bus_bits = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  info.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  info.max_smem_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  size_t bytes = 0;
  KT_CHECK_CU(d.cuDeviceTotalMem(&bytes, dev));
  info.memory_bytes = bytes;
  return info;
}
}  // namespace

std::vector<DeviceInfo> list_devices() {
  const Driver& d = Driver::get();
  int count = 0;
  KT_CHECK_CU(d.cuDeviceGetCount(&count));
  std::vector<DeviceInfo> out;
  for (int i = 0; i < count; ++i) out.push_back(query(d, i));
  return out;
}

Context::Context(int ordinal) {
  const Driver& d = Driver::get();
  if (ordinal > 0) {  // a device past the last is named with the machine's count, not a driver error
    int count = 0;
    KT_CHECK_CU(d.cuDeviceGetCount(&count));
    KTUNE_REQUIRE(ordinal < count, fmt::format("CUDA device {}: this machine has {} CUDA device{} ({})", ordinal,
                                               count, count == 1 ? "" : "s",
                                               count > 1 ? fmt::format("0 to {}", count - 1) : "device 0"));
  }
  KT_CHECK_CU(d.cuDeviceGet(&device_, ordinal));
  KT_CHECK_CU(d.cuDevicePrimaryCtxRetain(&context_, device_));
  KT_CHECK_CU(d.cuCtxSetCurrent(context_));
  info_ = query(d, ordinal);
}

void Context::make_current() const { KT_CHECK_CU(Driver::get().cuCtxSetCurrent(context_)); }

// The context stays current: every Context of the device holds the one
// primary context, so another alive on this thread (a second backend) goes on
// working through it; the next Context made sets it again.
Context::~Context() { Driver::get().cuDevicePrimaryCtxRelease(device_); }

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  KT_CHECK_CU(Driver::get().cuMemAlloc(&ptr_, bytes == 0 ? 1 : bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) Driver::get().cuMemFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) Driver::get().cuMemFree(ptr_);
    ptr_ = o.ptr_, bytes_ = o.bytes_;
    o.ptr_ = 0, o.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  KTUNE_REQUIRE(bytes <= bytes_, "upload larger than the device buffer");
  if (!bytes) return;
  // From pageable memory, cuMemcpyHtoD may return once the data is staged,
  // before the DMA into device memory is done; our streams are non-blocking,
  // so a kernel launched next on one of them could read a half-written
  // buffer. Waiting for the context makes the upload complete on return.
  KT_CHECK_CU(Driver::get().cuMemcpyHtoD(ptr_, host, bytes));
  KT_CHECK_CU(Driver::get().cuCtxSynchronize());
}

void DeviceBuffer::download(void* host, std::size_t bytes) const {
  KTUNE_REQUIRE(bytes <= bytes_, "download larger than the device buffer");
  if (bytes) KT_CHECK_CU(Driver::get().cuMemcpyDtoH(host, ptr_, bytes));
}

Stream::Stream() { KT_CHECK_CU(Driver::get().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING)); }
Stream::~Stream() { Driver::get().cuStreamDestroy(stream_); }
void Stream::synchronize() const { KT_CHECK_CU(Driver::get().cuStreamSynchronize(stream_)); }

Event::Event() { KT_CHECK_CU(Driver::get().cuEventCreate(&event_, CU_EVENT_DEFAULT)); }
Event::~Event() { Driver::get().cuEventDestroy(event_); }
void Event::record(CUstream stream) { KT_CHECK_CU(Driver::get().cuEventRecord(event_, stream)); }
float Event::elapsed_since(const Event& start) const {
  KT_CHECK_CU(Driver::get().cuEventSynchronize(event_));
  float ms = 0;
  KT_CHECK_CU(Driver::get().cuEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

Module::Module(const std::string& cubin) { KT_CHECK_CU(Driver::get().cuModuleLoadData(&module_, cubin.data())); }
Module::~Module() { Driver::get().cuModuleUnload(module_); }
CUfunction Module::function(const std::string& lowered_name) const {
  CUfunction f{};
  KT_CHECK_CU(Driver::get().cuModuleGetFunction(&f, module_, lowered_name.c_str()));
  return f;
}
std::pair<CUdeviceptr, std::size_t> Module::global(const std::string& name) const {
  CUdeviceptr address = 0;
  std::size_t bytes = 0;
  const CUresult rc = Driver::get().cuModuleGetGlobal(&address, &bytes, module_, name.c_str());
  if (rc == CUDA_ERROR_NOT_FOUND)
    throw_error(ErrorKind::kInvalidInput, fmt::format("the module has no __constant__ variable '{}' (in the global "
                                                      "namespace, not static)",
                                                      name));
  KT_CHECK_CU(rc);
  return {address, bytes};
}

}  // namespace ktune::tuner
