#include "tuner/emu/memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "base/error.hpp"

namespace ktune::tuner::emu {
namespace {

std::size_t page_size() {
  static const std::size_t p = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

}  // namespace

std::string describe_offset(const Region& region, const void* address) {
  const long long offset = region.offset_of(address);
  const auto size = static_cast<long long>(region.size);
  const auto bytes = [](long long n) { return fmt::format("{} byte{}", n, n == 1 ? "" : "s"); };
  if (offset < 0) return fmt::format("{} before the start of {} ({} bytes)", bytes(-offset), region.name, size);
  if (offset == size)
    return fmt::format("byte offset {} of {} ({} bytes), the first byte past its end", offset, region.name, size);
  if (offset > size)
    return fmt::format("byte offset {} of {} ({} bytes), {} after its last", offset, region.name, size,
                       bytes(offset - size + 1));
  return fmt::format("byte offset {} of {} ({} bytes)", offset, region.name, size);
}

GuardedBuffer::GuardedBuffer(std::string name, std::size_t size) : size_(size) {
  const std::size_t page = page_size();
  // The area rounded up to pages, and a guard page each side, must not wrap past the address space.
  if (size > std::numeric_limits<std::size_t>::max() / 2)
    throw_error(ErrorKind::kIo, fmt::format("emulation: cannot map {} bytes for {}", size, name));
  area_size_ = std::max<std::size_t>(page, (size + 15 + page - 1) / page * page);
  map_size_ = area_size_ + 2 * page;
  void* m = ::mmap(nullptr, map_size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) throw_error(ErrorKind::kIo, fmt::format("emulation: cannot map {} bytes for {}", size, name));
  map_ = static_cast<std::byte*>(m);
  area_ = map_ + page;
  if (::mprotect(area_, area_size_, PROT_READ | PROT_WRITE) != 0) {
    release();
    throw_error(ErrorKind::kIo, fmt::format("emulation: cannot protect the mapping of {}", name));
  }
  // Right-aligned against the trailing guard page, start rounded down to 16.
  const auto end = reinterpret_cast<std::uintptr_t>(area_ + area_size_);
  data_ = reinterpret_cast<std::byte*>((end - size) & ~std::uintptr_t{15});
  // area_ is page-aligned: little-endian halfwords 0xffc1 are canary_byte's bytes. The buffer's own bytes start
  // so too: a read of one never written is a NaN.
  std::fill_n(reinterpret_cast<std::uint16_t*>(area_), area_size_ / 2, std::uint16_t{0xffc1});
  region_ = Region{std::move(name), map_, map_ + map_size_, data_, size_};
}

GuardedBuffer::~GuardedBuffer() { release(); }

GuardedBuffer::GuardedBuffer(GuardedBuffer&& o) noexcept
    : map_(std::exchange(o.map_, nullptr)),
      map_size_(o.map_size_),
      area_(o.area_),
      area_size_(o.area_size_),
      data_(o.data_),
      size_(o.size_),
      region_(std::move(o.region_)) {}

GuardedBuffer& GuardedBuffer::operator=(GuardedBuffer&& o) noexcept {
  if (this != &o) {
    release();
    map_ = std::exchange(o.map_, nullptr);
    map_size_ = o.map_size_;
    area_ = o.area_;
    area_size_ = o.area_size_;
    data_ = o.data_;
    size_ = o.size_;
    region_ = std::move(o.region_);
  }
  return *this;
}

void GuardedBuffer::release() {
  if (map_) ::munmap(map_, map_size_);
  map_ = nullptr;
}

void GuardedBuffer::fill(unsigned char byte) {
  if (size_) std::memset(data_, byte, size_);
}

void GuardedBuffer::rearm_canary() const {
  for (std::byte* p = area_; p < data_; ++p) *p = std::byte{canary_byte(p)};
  for (std::byte* p = data_ + size_; p < area_ + area_size_; ++p) *p = std::byte{canary_byte(p)};
}

std::string GuardedBuffer::check_canary() const {
  for (const std::byte* p = area_; p < data_; ++p)
    if (*p != std::byte{canary_byte(p)})
      return fmt::format("out-of-bounds write: {} was overwritten", describe_offset(region_, p));
  for (const std::byte* p = data_ + size_; p < area_ + area_size_; ++p)
    if (*p != std::byte{canary_byte(p)})
      return fmt::format("out-of-bounds write: {} was overwritten", describe_offset(region_, p));
  return {};
}

}  // namespace ktune::tuner::emu
