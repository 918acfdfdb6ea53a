#include "base/env.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <charconv>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include "base/error.hpp"

#ifndef KTUNE_DEFAULT_CUDA_INCLUDE
#define KTUNE_DEFAULT_CUDA_INCLUDE "/usr/local/cuda/include"
#endif
#ifndef KTUNE_DEFAULT_HOST_CXX
#define KTUNE_DEFAULT_HOST_CXX "c++"
#endif

namespace ktune::env {

std::string get(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

namespace {

// The cache folder without HOME or XDG_CACHE_HOME: this user's own in the
// temporary folder, which every user may write to. Emulation objects are
// loaded from the cache as code, so the folder is made private (0700) and one
// that another user made or others may write to is refused, not used.
std::filesystem::path private_fallback(const std::filesystem::path& tmp, bool make) {
  const uid_t uid = ::geteuid();
  const auto dir = tmp / fmt::format("ktune-cache-{}", uid);
  struct stat st {};
  if (!make && ::lstat(dir.c_str(), &st) != 0 && errno == ENOENT) return dir;  // holds nothing, and stays unmade
  if (make && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw_error(ErrorKind::kIo, fmt::format("cannot make the cache folder {}: {}; set KTUNE_CACHE_DIR", dir.string(),
                                            std::strerror(errno)));
  const auto refuse = [&](const std::string& why) {
    throw_error(ErrorKind::kInvalidInput,
                fmt::format("the cache folder {} (used without HOME or XDG_CACHE_HOME) {}: ktune loads code from its "
                            "cache and will not use it; remove it, or set KTUNE_CACHE_DIR to a folder of your own",
                            dir.string(), why));
  };
  if (::lstat(dir.c_str(), &st) != 0) refuse(std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) refuse("is no folder (a link or a file another user may have put there)");
  if (st.st_uid != uid) refuse(fmt::format("belongs to another user (uid {}, not {})", st.st_uid, uid));
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    refuse(fmt::format("may be written by other users (mode {:o})", st.st_mode & 0777));
  return dir;
}

}  // namespace

std::filesystem::path cache_dir(bool make) {
  // Something other than a folder where the cache folder goes is named with the variable that put it there,
  // before a write into it fails naming a file in it.
  const auto folder = [](const std::filesystem::path& p, const char* from) {
    std::error_code ec;
    KTUNE_REQUIRE(!std::filesystem::exists(p, ec) || std::filesystem::is_directory(p, ec),
                  fmt::format("the cache folder {} (from {}) is a file, not a folder; set KTUNE_CACHE_DIR to a folder "
                              "ktune may write",
                              p.string(), from));
    // A folder to be made under a file never can be: its nearest existing folder above is said.
    for (auto above = p.parent_path(); !above.empty(); above = above.parent_path()) {
      if (std::filesystem::exists(above, ec)) {
        KTUNE_REQUIRE(std::filesystem::is_directory(above, ec),
                      fmt::format("the cache folder {} (from {}) is under {}, a file, not a folder; set "
                                  "KTUNE_CACHE_DIR to a folder ktune may write",
                                  p.string(), from, above.string()));
        break;
      }
      if (above == above.parent_path()) break;
    }
    return p;
  };
  if (auto v = get("KTUNE_CACHE_DIR"); !v.empty()) return folder(v, "KTUNE_CACHE_DIR");
  // A relative XDG_CACHE_HOME is invalid and ignored (the XDG Base Directory spec): it would put a cache in
  // whatever folder a job runs in.
  if (const std::filesystem::path v = get("XDG_CACHE_HOME"); v.is_absolute())
    return folder(v / "ktune", "XDG_CACHE_HOME");
  if (auto v = get("HOME"); !v.empty()) return folder(std::filesystem::path(v) / ".cache" / "ktune", "HOME");
  std::error_code ec;
  const auto tmp = std::filesystem::temp_directory_path(ec);
  const std::string tmpdir = get("TMPDIR");
  KTUNE_REQUIRE(!ec, fmt::format("no folder for the cache: no KTUNE_CACHE_DIR, absolute XDG_CACHE_HOME or HOME, and "
                                 "{} is no folder ({}); set KTUNE_CACHE_DIR",
                                 tmpdir.empty() ? std::string("the temporary folder") : "TMPDIR=" + tmpdir,
                                 ec.message()));
  return private_fallback(tmp, make);
}

std::string cuda_include_dir() {
  if (auto v = get("KTUNE_CUDA_INCLUDE"); !v.empty()) {
    std::error_code ec;
    KTUNE_REQUIRE(std::filesystem::is_directory(v, ec),
                  fmt::format("KTUNE_CUDA_INCLUDE={} is no folder; name the CUDA headers' folder (the toolkit's, {}, "
                              "where it is unset)",
                              v, KTUNE_DEFAULT_CUDA_INCLUDE));
    return v;
  }
  return KTUNE_DEFAULT_CUDA_INCLUDE;
}

unsigned check_thread_count(std::int64_t n, std::string_view what) {
  KTUNE_REQUIRE(n >= 1 && n <= kMaxThreads,
                fmt::format("{} must be in 1..{}, got {}", what, kMaxThreads, n));
  return static_cast<unsigned>(n);
}

unsigned hardware_threads() { return std::clamp(std::thread::hardware_concurrency(), 1u, kMaxThreads); }

unsigned compile_threads() {
  if (auto v = get("KTUNE_COMPILE_THREADS"); !v.empty()) {
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    KTUNE_REQUIRE(!std::isspace(static_cast<unsigned char>(v.front())) && end != v.c_str() && *end == '\0' &&
                      errno == 0,
                  fmt::format("KTUNE_COMPILE_THREADS must be an integer in 1..{}, got '{}'", kMaxThreads, v));
    return check_thread_count(n, "KTUNE_COMPILE_THREADS");
  }
  return hardware_threads();
}

unsigned emu_hang_seconds() {
  constexpr long long kDay = 86400;
  const auto v = get("KTUNE_EMU_HANG_SECONDS");
  if (v.empty()) return 60;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  KTUNE_REQUIRE(!std::isspace(static_cast<unsigned char>(v.front())) && end != v.c_str() && *end == '\0' &&
                    errno == 0 && n >= 0 && n <= kDay,
                fmt::format("KTUNE_EMU_HANG_SECONDS must be an integer in 0..{} (0: never), got '{}'", kDay,
                            v.substr(0, 40)));
  return static_cast<unsigned>(n);
}

std::string host_cxx() {
  const auto v = get("KTUNE_HOST_CXX");
  return v.empty() ? std::string(KTUNE_DEFAULT_HOST_CXX) : v;
}

void require_host_cxx() {
  const auto v = get("KTUNE_HOST_CXX");
  if (v.empty()) return;
  // One executable, a path or a name on PATH: a wrong one is the setting's fault, said before any compile.
  bool found = false;
  if (v.find('/') != std::string::npos) {
    found = ::access(v.c_str(), X_OK) == 0 && !std::filesystem::is_directory(v);
  } else {
    const std::string path = get("PATH");
    for (std::size_t start = 0; !found && start <= path.size();) {
      const std::size_t end = std::min(path.find(':', start), path.size());
      const std::filesystem::path dir = path.substr(start, end - start);
      found = ::access((dir.empty() ? std::filesystem::path(".") / v : dir / v).c_str(), X_OK) == 0;
      start = end + 1;
    }
  }
  KTUNE_REQUIRE(found, fmt::format("KTUNE_HOST_CXX '{}' is no executable here (a path, or a name on PATH); give the "
                                   "host compiler of the emulation (g++, clang++), or unset it for {}",
                                   v.substr(0, 200), KTUNE_DEFAULT_HOST_CXX));
}

PrintLevel print_level() {
  const auto v = get("KTUNE_PRINT");
  if (v.empty() || v == "summary") return PrintLevel::kSummary;
  if (v == "quiet") return PrintLevel::kQuiet;
  if (v == "all") return PrintLevel::kAll;
  throw_error(ErrorKind::kInvalidInput,
              fmt::format("KTUNE_PRINT must be quiet, summary or all, got '{}'", v.substr(0, 40)));
}

std::filesystem::path binary_cache_dir(bool make) { return cache_dir(make) / "cubin"; }
std::filesystem::path emu_cache_dir(bool make) { return cache_dir(make) / "emu"; }
std::filesystem::path session_log_dir(bool make) { return cache_dir(make) / "sessions"; }
std::filesystem::path gpu_mark_dir() {
  // A relative one is ignored, as a relative XDG_CACHE_HOME: two processes in two folders would not meet.
  if (const std::filesystem::path v = get("KTUNE_GPU_MARK_DIR"); v.is_absolute()) return v;
  std::error_code ec;
  if (std::filesystem::is_directory("/dev/shm", ec)) return "/dev/shm/ktune-gpus";
  const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  return (ec ? std::filesystem::path("/tmp") : tmp) / "ktune-gpus";
}

bool no_device() {
  std::string v = get("KTUNE_NO_DEVICE");
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  return !v.empty() && v != "0" && v != "false" && v != "no" && v != "off";
}

EmuSchedule emu_schedule() {
  const auto v = get("KTUNE_EMU_SCHEDULE");
  if (v.empty()) return {.order = EmuSchedule::Order::kShuffle, .seed = 1};
  if (v == "in-order") return {};
  if (v == "reverse") return {.order = EmuSchedule::Order::kReverse};
  if (v == "shuffle") return {.order = EmuSchedule::Order::kShuffle, .seed = 1};
  if (v.rfind("shuffle:", 0) == 0) {
    std::uint64_t seed = 0;
    const char* last = v.data() + v.size();
    if (const auto [end, ec] = std::from_chars(v.data() + 8, last, seed); ec == std::errc() && end == last)
      return {.order = EmuSchedule::Order::kShuffle, .seed = seed};
  }
  throw_error(ErrorKind::kInvalidInput,
              fmt::format("KTUNE_EMU_SCHEDULE must be in-order, reverse or shuffle[:SEED], got '{}'", v.substr(0, 40)));
}

}  // namespace ktune::env
