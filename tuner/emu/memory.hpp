// Emulated device memory: every buffer a kernel may touch lives in its own
// mapping, right-aligned against an inaccessible guard page and preceded by
// one, so an access past either end faults and the fault handler (emu_grid)
// can name the buffer and the offset. The few bytes between the buffer's end
// and the guard page (< 16, kept for 16-byte alignment) and the space before
// its start hold a canary that is checked after each launch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ktune::tuner::emu {

/// Where a buffer lives, for mapping a faulting address back to it.
struct Region {
  std::string name;
  const std::byte* map_begin = nullptr;  ///< whole mapping, guards included
  const std::byte* map_end = nullptr;
  const std::byte* data = nullptr;
  std::size_t size = 0;

  bool contains(const void* address) const {
    const auto* p = static_cast<const std::byte*>(address);
    return p >= map_begin && p < map_end;
  }
  /// Signed offset of `address` from the buffer's first byte.
  long long offset_of(const void* address) const {
    return static_cast<long long>(static_cast<const std::byte*>(address) - data);
  }
};

/// Describes an access at `address` relative to `region`, e.g.
/// "12 bytes past the end of buffer 'out' (4096 bytes)".
std::string describe_offset(const Region& region, const void* address);

/// One guarded buffer. Not copyable; movable.
class GuardedBuffer {
 public:
  /// Maps `size` bytes (16-byte aligned start); throws Error(kIo) when mmap fails.
  GuardedBuffer(std::string name, std::size_t size);
  ~GuardedBuffer();
  GuardedBuffer(GuardedBuffer&& other) noexcept;
  GuardedBuffer& operator=(GuardedBuffer&& other) noexcept;
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  const Region& region() const { return region_; }

  /// Fills the buffer with `byte` (0xff poisons floats as NaN).
  void fill(unsigned char byte);
  /// Empty when the canary around the buffer is intact; else says where it was overwritten.
  std::string check_canary() const;
  /// Writes the canary around the buffer again (after a launch that overwrote it was reported), so a
  /// later launch is judged by what it writes itself.
  void rearm_canary() const;

 private:
  void release();

  std::byte* map_ = nullptr;
  std::size_t map_size_ = 0;
  std::byte* area_ = nullptr;  // accessible pages
  std::size_t area_size_ = 0;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  Region region_;
};

/// The canary kept around buffers, by address: 0xc1 at even addresses,
/// 0xff at odd ones (little-endian halfwords 0xffc1). A read a little before
/// a buffer's start (the page's slack in front of it) or in the bytes past
/// its end that alignment leaves finds NaN in bf16, f16, f32 and f64, which
/// spoils what it computes where it would otherwise pass on plausible values,
/// and a large negative number in a signed integer; a write there is found
/// by check_canary, -1 or a poisoned (all-ones) NaN included.
inline unsigned char canary_byte(const void* address) {
  return (reinterpret_cast<std::uintptr_t>(address) & 1) ? 0xff : 0xc1;
}

}  // namespace ktune::tuner::emu
