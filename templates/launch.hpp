// What a family hands an execution backend: rendered source with its NVRTC
// name expressions, and launches (geometry plus arguments packed by value).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace ktune::templates {

/// Rendered source: self-contained text (compiles with nvcc alone) and the
/// NVRTC name expressions of its kernels, in launch-plan order.
struct Rendered {
  std::string source;
  std::vector<std::string> kernels;
  /// The source uses instructions only sm_90's arch-specific target has
  /// (wgmma, templates/common/wgmma.cuh): compiled for sm_90a where the
  /// device is sm_90, so a binary of it runs on sm_90 devices alone.
  bool arch_specific = false;
  /// Every kernel of the source calls kt::wait_previous_kernel() before it
  /// touches memory (every template's kernels do; render_template sets it),
  /// so a backend may launch them before the previous kernel of the stream
  /// has finished (programmatic dependent launch, Backend::set_programmatic).
  bool waits_previous_kernel = false;
};

/// What a kernel argument or parameter is, as far as a launch can tell: a
/// float passed where the kernel takes an int of the same size is read as
/// other bytes.
enum class ArgKind : unsigned char { kOther, kFloat, kInteger };

/// Kernel arguments by value, laid out as cuLaunchKernel's `kernelParams`
/// expects (one pointer per argument).
class ArgPack {
 public:
  template <class T>
  ArgPack& add(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "kernel arguments are copied bytewise");
    const std::size_t align = alignof(T);
    std::size_t offset = (storage_.size() + align - 1) / align * align;
    storage_.resize(offset + sizeof(T));
    std::memcpy(storage_.data() + offset, &value, sizeof(T));
    offsets_.push_back(offset);
    sizes_.push_back(sizeof(T));
    kinds_.push_back(kind_of<T>());
    return *this;
  }
  /// Appends `size` raw bytes aligned to `align`: a struct whose layout is
  /// only known at run time (e.g. an array sized by a tunable).
  ArgPack& add_bytes(const void* data, std::size_t size, std::size_t align) {
    std::size_t offset = (storage_.size() + align - 1) / align * align;
    storage_.resize(offset + size);
    std::memcpy(storage_.data() + offset, data, size);
    offsets_.push_back(offset);
    sizes_.push_back(size);
    kinds_.push_back(ArgKind::kOther);
    return *this;
  }
  /// Pointers into this pack's storage; valid while the pack lives unchanged.
  /// (cuLaunchKernel takes them as `void**` and only reads through them.)
  std::vector<void*> pointers() const {
    std::vector<void*> p;
    for (auto o : offsets_) p.push_back(const_cast<std::byte*>(storage_.data()) + o);
    return p;
  }
  std::size_t count() const { return offsets_.size(); }
  /// The packed arguments (padding zeroed) and where each starts: two packs
  /// with equal bytes and offsets pass the kernel the same values.
  const std::vector<std::byte>& bytes() const { return storage_; }
  const std::vector<std::size_t>& offsets() const { return offsets_; }
  /// Bytes of each argument.
  const std::vector<std::size_t>& sizes() const { return sizes_; }
  /// What each argument is: a floating-point number, an integer (an address
  /// too), or other bytes.
  const std::vector<ArgKind>& kinds() const { return kinds_; }

  template <class T>
  static constexpr ArgKind kind_of() {
    if constexpr (std::is_floating_point_v<T>) return ArgKind::kFloat;
    if constexpr (std::is_integral_v<T> || std::is_pointer_v<T> || std::is_enum_v<T>) return ArgKind::kInteger;
    return ArgKind::kOther;
  }

 private:
  std::vector<std::byte> storage_;  // malloc alignment (16) covers every argument type
  std::vector<std::size_t> offsets_;
  std::vector<std::size_t> sizes_;
  std::vector<ArgKind> kinds_;
};

/// A copy into a `__constant__` variable of the module, made on the launch's
/// stream before its kernel runs (Kernel Tuner's cmem_args): `bytes` from the
/// device address `source` (a buffer of the plan) to the variable `symbol`
/// (declared in the global namespace, not static: its name is the module's).
struct ConstantCopy {
  std::string symbol;
  std::uint64_t source = 0;
  std::size_t bytes = 0;
  std::string label;  ///< what is copied, for messages: "buffer 'filter' of conv.json"
};

/// One kernel launch of a plan.
struct Launch {
  int kernel = 0;  ///< index into Rendered::kernels
  std::array<unsigned, 3> grid{1, 1, 1};
  std::array<unsigned, 3> block{1, 1, 1};
  unsigned dynamic_smem = 0;
  ArgPack args;
  std::vector<ConstantCopy> constants;  ///< made before the kernel runs, in order
};

}  // namespace ktune::templates
