#include "tuner/emu/module.hpp"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/files.hpp"
#include "base/hash.hpp"
#include "templates/embedded.hpp"

namespace ktune::tuner::emu {
namespace {

namespace fs = std::filesystem;

// -fsanitize=alignment: a misaligned access reaches kt_emu.hpp's own hook
// (never the sanitizer runtime's) and fails the block, as a GPU would fault.
// So does an index outside an array of known size (-fsanitize=bounds; clang++
// names the check that calls a hook array-bounds, its local-bounds traps).
// An object's flags are "-x c++ <kFlags> -shared <kCodeFlags>"; the precompiled prelude's "-x c++-header <kFlags>
// <kCodeFlags>" (g++ takes no second -x for one file, and -shared would link the header).
constexpr const char* kFlags = "-std=c++20 -O1 -fPIC";
// -fsanitize=float-cast-overflow: a float-to-integer conversion out of the integer's range (which a GPU saturates)
// reaches kt_emu.hpp's hook too, and fails the block with its line.
// -fstack-clash-protection: a frame larger than a page touches each of its pages as it is made, so one past an
// emulated thread's stack meets the guard page below it (a stack overflow, named) instead of jumping over it and
// writing into another thread's stack.
constexpr const char* kCodeFlags =
    "-fvisibility=hidden -w -fsanitize=alignment -fsanitize=float-cast-overflow -fstack-clash-protection";
// Line tables alone (no variables): a fault's instruction maps to its line of the rendered source (source_line).
constexpr const char* kLineTablesGcc = " -g1";
constexpr const char* kLineTablesClang = " -gline-tables-only";

/// Runs `command` through the shell; returns its exit status and output.
int run_capture(const std::string& command, std::string& output) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

const std::string& compiler_version() {
  static const std::string version = [] {
    std::string out;
    run_capture(shell_quote(env::host_cxx()) + " --version", out);
    return out.substr(0, out.find('\n'));
  }();
  return version;
}

/// Whether the host compiler is clang (which spells some options its own way, and reads no .gch by name).
bool host_is_clang() { return compiler_version().find("clang") != std::string::npos; }

/// The host compiler's flags for an object, or for the precompiled prelude (`header`): kFlags, kCodeFlags, and
/// the bounds check and line tables it spells its way.
std::string host_flags(bool header) {
  const bool clang = host_is_clang();
  return fmt::format("{} {}{} {}", header ? "-x c++-header" : "-x c++", kFlags, header ? "" : " -shared", kCodeFlags) +
         (clang ? " -fsanitize=array-bounds" : " -fsanitize=bounds") + (clang ? kLineTablesClang : kLineTablesGcc);
}

/// An object's flags.
const std::string& compile_flags() {
  static const std::string flags = host_flags(false);
  return flags;
}

/// Trims a compiler log to its first lines: enough to see the first error.
std::string log_head(const std::string& log, std::size_t max_lines = 12) {
  std::size_t pos = 0;
  for (std::size_t i = 0; i < max_lines && pos != std::string::npos; ++i) {
    pos = log.find('\n', pos);
    if (pos != std::string::npos) ++pos;
  }
  return pos == std::string::npos ? log : log.substr(0, pos) + "...";
}

// The size of the thread-local block (PT_TLS) of the object loaded at
// `base`; 0 when it has none.
std::size_t tls_size(std::uintptr_t base) {
  struct Search {
    std::uintptr_t base;
    std::size_t bytes = 0;
  } search{base};
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_addr != s->base) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_TLS) s->bytes = info->dlpi_phdr[i].p_memsz;
        return 1;
      },
      &search);
  return search.bytes;
}

/// Throws where every user may write to `path` (the objects' folder, or an
/// object): its code could be anyone's, and dlopen runs an object's
/// constructors as it loads it, before any check of ours.
void require_unshared(const fs::path& path, const char* what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !(st.st_mode & S_IWOTH)) return;  // not there yet: this process makes it
  throw_error(ErrorKind::kInvalidInput,
              fmt::format("emulation objects are not loaded from {}: every user may write to {} {} (mode {:o}), so "
                          "its code could be anyone's; make it writable by its owner only (chmod o-w), or set "
                          "KTUNE_CACHE_DIR to a folder of your own",
                          env::emu_cache_dir().string(), what, path.string(), st.st_mode & 07777));
}

std::shared_ptr<Module> open_module(const fs::path& path, const templates::Rendered& rendered, std::string* why) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    *why = ::dlerror();
    return nullptr;
  }
  auto module = std::make_shared<Module>();
  module->path = path.string();
  module->handle = handle;
  if (link_map* map = nullptr; ::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map)
    module->tls_bytes = tls_size(map->l_addr);
  module->kernel_names = rendered.kernels;
  auto version = reinterpret_cast<kt::emu::AbiVersionFn>(::dlsym(handle, "kt_emu_abi_version"));
  module->current_slot = reinterpret_cast<kt::emu::CurrentSlotFn>(::dlsym(handle, "kt_emu_current_slot"));
  if (!version || version() != kt::emu::kAbiVersion || !module->current_slot) {
    *why = "not an emulation module of this version";
    return nullptr;  // the handle stays open; harmless
  }
  for (std::size_t i = 0; i < rendered.kernels.size(); ++i) {
    auto entry = reinterpret_cast<kt::emu::KernelEntryFn>(::dlsym(handle, fmt::format("kt_emu_kernel_{}", i).c_str()));
    if (!entry) {
      *why = fmt::format("kernel entry {} missing", i);
      return nullptr;
    }
    module->kernels.push_back(entry);
    using ParametersFn = int (*)(unsigned*, int);
    auto parameters =
        reinterpret_cast<ParametersFn>(::dlsym(handle, fmt::format("kt_emu_kernel_{}_parameters", i).c_str()));
    if (!parameters) {
      *why = fmt::format("kernel parameters {} missing", i);
      return nullptr;
    }
    std::vector<unsigned> sizes(256);
    sizes.resize(static_cast<std::size_t>(std::min(parameters(sizes.data(), 256), 256)));
    // The trampoline's bits 28 and 29 say floating point and integer (or pointer).
    std::vector<templates::ArgKind> kinds;
    for (unsigned& size : sizes) {
      kinds.push_back(size & (1u << 28)   ? templates::ArgKind::kFloat
                      : size & (1u << 29) ? templates::ArgKind::kInteger
                                          : templates::ArgKind::kOther);
      size &= (1u << 28) - 1;
    }
    module->parameter_sizes.emplace_back(sizes.begin(), sizes.end());
    module->parameter_kinds.push_back(std::move(kinds));
  }
  return module;
}

/// The process that compiles into tmp-<key>-<pid>-<n>.{cpp,so} (`name`), else 0.
pid_t compile_file_writer(const std::string& name) {
  if (name.rfind("tmp-", 0) != 0) return 0;
  const std::size_t after_key = name.find('-', 4);
  if (after_key == std::string::npos) return 0;
  long pid = 0;
  const auto [end, error] = std::from_chars(name.data() + after_key + 1, name.data() + name.size(), pid);
  if (error != std::errc() || end == name.data() + name.size() || *end != '-' || pid <= 0) return 0;
  return static_cast<pid_t>(pid);
}

/// Removes the tmp-<key>-<pid>-<n> sources and objects of compiles whose
/// process is gone (killed before it removed them); a live one's are left.
void remove_orphans(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const pid_t pid = compile_file_writer(entry.path().filename().string());
    if (pid > 0 && process_gone(pid)) fs::remove(entry.path(), ec);
  }
}

/// Makes the objects' folder where it is missing, writable by its owner alone whatever the umask: objects are not
/// loaded from a folder every user may write to.
void make_object_folder(const fs::path& dir) {
  std::error_code ec;
  if (fs::create_directories(dir, ec)) fs::permissions(dir, fs::perms::others_write, fs::perm_options::remove, ec);
}

/// What every object starts with: kt.cuh's host half (kt_emu.hpp and the standard headers it includes).
const std::string& emulation_prelude() {
  static const std::string prelude = "#define KT_EMULATION 1\n" + templates::expand_includes("common/kt_emu.hpp");
  return prelude;
}

/// What follows the prelude: the rendered source and its trampolines.
std::string emulation_body(const templates::Rendered& rendered) {
  std::string s = "#line 1 \"rendered.cu\"\n";
  s += rendered.source;
  s += "\n// ---- trampolines: kernelParams-style argument arrays to typed calls\n";
  s += "namespace kt::emu {\n"
       "template <class... P, std::size_t... I>\n"
       "inline void invoke_with(void (*kernel)(P...), void** args, std::index_sequence<I...>) {\n"
       "  kernel(*static_cast<std::remove_cv_t<std::remove_reference_t<P>>*>(args[I])...);\n"
       "}\n"
       "template <class... P>\n"
       "inline void invoke(void (*kernel)(P...), void** args) {\n"
       "  invoke_with(kernel, args, std::index_sequence_for<P...>{});\n"
       "}\n"
       "template <class P, class T = std::remove_cv_t<std::remove_reference_t<P>>>\n"
       "constexpr unsigned size_and_kind() {\n"
       "  return static_cast<unsigned>(sizeof(T)) | (std::is_floating_point_v<T> ? 1u << 28 : 0u) |\n"
       "         (std::is_integral_v<T> || std::is_pointer_v<T> || std::is_enum_v<T> ? 1u << 29 : 0u);\n"
       "}\n"
       "template <class... P>\n"
       "inline int parameters(void (*)(P...), unsigned* sizes, int max) {\n"
       "  const unsigned all[] = {0u, size_and_kind<P>()...};\n"
       "  for (int i = 0; i < static_cast<int>(sizeof...(P)) && i < max; ++i) sizes[i] = all[i + 1];\n"
       "  return static_cast<int>(sizeof...(P));\n"
       "}\n"
       "}  // namespace kt::emu\n";
  s += "#define KT_EMU_EXPORT extern \"C\" __attribute__((visibility(\"default\")))\n";
  s += "KT_EMU_EXPORT int kt_emu_abi_version() { return ::kt::emu::kAbiVersion; }\n";
  s += "KT_EMU_EXPORT ::kt::emu::Thread** kt_emu_current_slot() { return &::kt::emu::detail::current; }\n";
  for (std::size_t i = 0; i < rendered.kernels.size(); ++i) {
    s += fmt::format("KT_EMU_EXPORT void kt_emu_kernel_{}(void** args) {{ ::kt::emu::invoke(&{}, args); }}\n", i,
                     rendered.kernels[i]);
    s += fmt::format("KT_EMU_EXPORT int kt_emu_kernel_{}_parameters(unsigned* sizes, int max) {{ "
                     "return ::kt::emu::parameters(&{}, sizes, max); }}\n",
                     i, rendered.kernels[i]);
  }
  return s;
}

/// The prelude as a header beside the objects, precompiled (GCC's <header>.gch, which it reads in place of the
/// header's text where the compiler and options are those it was made with, and else ignores): an object's compile
/// then parses its kernel alone, not the prelude's ~90 KB again. The header's path, made once per process and
/// folder; none with clang, or where it could not be made (the object is then compiled from the whole text).
std::optional<fs::path> precompiled_prelude(const fs::path& dir) {
  if (host_is_clang()) return std::nullopt;
  static std::mutex mutex;
  static std::map<fs::path, fs::path> made;
  std::lock_guard lock(mutex);
  const std::string key =
      Hasher().add(emulation_prelude()).add(compile_flags()).add(compiler_version()).hex().substr(0, 16);
  const fs::path header = dir / ("prelude-" + key + ".hpp"), pch = dir / ("prelude-" + key + ".hpp.gch");
  require_unshared(header, "the precompiled prelude");
  require_unshared(pch, "the precompiled prelude");
  std::error_code ec;
  if (auto it = made.find(dir); it != made.end() && it->second == header && fs::exists(pch, ec)) return header;
  make_object_folder(dir);
  if (!fs::exists(header, ec)) {
    try {
      write_file_atomic(header, emulation_prelude());
    } catch (const Error&) {
      return std::nullopt;  // the folder removed under it, or full: the whole text then
    }
  }
  if (!fs::exists(pch, ec)) {
    static std::atomic<int> counter{0};
    const fs::path tmp = dir / fmt::format("tmp-{}-{}-{}.hpp.gch", key.substr(0, 8), ::getpid(), counter++);
    std::string log;
    const int rc = run_capture(fmt::format("{} {} -o {} {}", shell_quote(env::host_cxx()), host_flags(true),
                                           shell_quote(tmp), shell_quote(header)),
                               log);
    if (rc == 0 && fs::exists(header, ec)) fs::rename(tmp, pch, ec);
    if (rc != 0 || ec || !fs::exists(pch, ec)) {
      fs::remove(tmp, ec);
      return std::nullopt;
    }
  }
  made[dir] = header;
  return header;
}

/// Throws kCompile with the host compiler's log for `rendered`.
[[noreturn]] void compile_failed(const templates::Rendered& rendered, const std::string& log) {
  const std::string kernel = rendered.kernels.empty() ? "(no kernel)" : rendered.kernels.front();
  throw_error(ErrorKind::kCompile, fmt::format("host compiler failed on {} ({} {}): {}", kernel, env::host_cxx(),
                                               compile_flags(), log_head(log)));
}

}  // namespace

std::string emulation_source(const templates::Rendered& rendered) {
  return "// Emulation translation unit: kt.cuh's host half, the rendered source, trampolines.\n" +
         emulation_prelude() + emulation_body(rendered);
}

unsigned char* Module::thread_block() const {
  void* block = nullptr;
  if (!handle || tls_bytes == 0 || ::dlinfo(handle, RTLD_DI_TLS_DATA, &block) != 0) return nullptr;
  return static_cast<unsigned char*>(block);
}

std::pair<unsigned char*, std::size_t> Module::global(const std::string& name) const {
  void* address = handle ? ::dlsym(handle, name.c_str()) : nullptr;
  Dl_info info{};
  void* entry = nullptr;  // the symbol's ElfW(Sym)
  if (address) ::dladdr1(address, &info, &entry, RTLD_DL_SYMENT);
  const auto* symbol = static_cast<const ElfW(Sym)*>(entry);
  if (!symbol || ELF64_ST_TYPE(symbol->st_info) != STT_OBJECT)
    throw_error(ErrorKind::kInvalidInput, fmt::format("the module has no __constant__ variable '{}' (in the global "
                                                      "namespace, not static)",
                                                      name));
  return {static_cast<unsigned char*>(address), symbol->st_size};
}

std::string emulation_compile_options() { return env::host_cxx() + " " + compile_flags(); }

std::string source_line(const void* pc) {
  Dl_info info{};
  if (!pc || ::dladdr(pc, &info) == 0 || !info.dli_fname || !info.dli_fbase) return "";
  // An emulation module's alone: a pc in the C library (a printf, a memcpy) has line tables of its own, whose
  // relative paths would read as a kernel's file.
  std::error_code ec;
  const fs::path folder = fs::weakly_canonical(fs::path(info.dli_fname).parent_path(), ec);
  if (folder != fs::weakly_canonical(env::emu_cache_dir(), ec)) return "";
  // The address within the module's file, as its line tables count (a shared object's are from 0).
  const auto offset = reinterpret_cast<std::uintptr_t>(pc) - reinterpret_cast<std::uintptr_t>(info.dli_fbase);
  std::string out;
  if (run_capture(fmt::format("addr2line -i -e {} 0x{:x}", shell_quote(info.dli_fname), offset), out) != 0) return "";
  // One "file:line" per frame, the innermost first: the first of the rendered source's, "rendered.cu" or a file
  // its #line markers name (a kernel spec's sources, which the line tables hold under the compiler's folder);
  // never the prelude's (the precompiled prelude-<hash>.hpp, or the tmp-<key>-... source compiled whole) or a
  // system header's.
  const auto kernel_file = [](const std::string& path) {
    const std::string name = fs::path(path).filename().string();
    return name == "rendered.cu" || (path.rfind("/usr/", 0) != 0 && name.rfind("prelude-", 0) != 0 &&
                                     name.rfind("tmp-", 0) != 0 && !name.empty());
  };
  std::size_t at = 0;
  for (std::string line; at < out.size(); at += line.size() + 1) {
    line = out.substr(at, out.find('\n', at) - at);
    const std::size_t colon = line.rfind(':');
    if (colon == std::string::npos) continue;
    const std::string path = line.substr(0, colon), file = fs::path(path).filename().string();
    const std::string number = line.substr(colon + 1, line.find(' ', colon) - colon - 1);
    if (kernel_file(path) && !number.empty() && number != "?" && number != "0") return file + ":" + number;
  }
  return "";
}

void check_object_folder() { require_unshared(env::emu_cache_dir(), "the folder"); }

bool compile_in_progress(const std::string& name) {
  const pid_t pid = compile_file_writer(name);
  return pid > 0 && !process_gone(pid);
}

std::shared_ptr<const Module> load_module(const templates::Rendered& rendered) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const Module>> loaded;

  const std::string source = emulation_source(rendered);
  Hasher hasher;
  hasher.add(source).add(emulation_compile_options()).add(compiler_version());
  const std::string key = hasher.hex();
  {
    std::lock_guard lock(mutex);
    if (auto it = loaded.find(key); it != loaded.end()) return it->second;
  }
  const fs::path dir = env::emu_cache_dir();
  const fs::path path = dir / (key + ".so");
  std::string why;
  std::shared_ptr<Module> module;
  check_object_folder();
  if (fs::exists(path)) {
    require_unshared(path, "the object");
    module = open_module(path, rendered, &why);
    if (module) module->from_cache = true;
  }
  // A compile whose files another process removed on the way (`ktune cache clean`, a cron job emptying the
  // cache) failed for that, not for its kernel: compiled again, a few times, before it is said so.
  constexpr int kAttempts = 3;
  for (int attempt = 1; !module; ++attempt) {
    static std::atomic<int> counter{0};
    std::error_code ec;
    const auto prelude = precompiled_prelude(dir);
    make_object_folder(dir);
    static std::once_flag swept;
    std::call_once(swept, remove_orphans, dir);
    const std::string stem = fmt::format("tmp-{}-{}-{}", key.substr(0, 8), ::getpid(), counter++);
    const fs::path src = dir / (stem + ".cpp"), obj = dir / (stem + ".so");
    const std::string command = fmt::format("{} {} -o {} {}", shell_quote(env::host_cxx()), compile_flags(),
                                            shell_quote(obj), shell_quote(src));
    std::string log;
    int rc = -1;
    // The same object from the precompiled prelude where there is one; from the whole text where there is none,
    // or where that compile fails (its log then says what the whole text's does).
    if (prelude) {
      write_file_atomic(src, fmt::format("#include \"{}\"\n", prelude->string()) + emulation_body(rendered));
      rc = run_capture(command, log);
    }
    if (!prelude || (rc != 0 && fs::exists(src, ec))) {
      log.clear();
      write_file_atomic(src, source);
      rc = run_capture(command, log);
    }
    bool removed = !fs::exists(src, ec) || (rc == 0 && !fs::exists(obj, ec));
    if (rc == 0 && !removed) {
      try {
        write_file_atomic(path, read_file(obj));
      } catch (const Error&) {
        if (fs::exists(obj, ec)) throw;
        removed = true;
      }
      if (!removed) module = open_module(path, rendered, &why);
    }
    fs::remove(src, ec);
    fs::remove(obj, ec);
    if (module) break;
    if (removed || (rc == 0 && !fs::exists(path, ec))) {
      if (attempt < kAttempts) continue;
      throw_error(ErrorKind::kIo, fmt::format("the files of an emulation compile were removed under it {} times "
                                              "(another process empties {}: ktune cache clean?); run again once it "
                                              "is done",
                                              kAttempts, dir.string()));
    }
    if (rc != 0) compile_failed(rendered, log);
    throw_error(ErrorKind::kCompile, fmt::format("cannot load emulation module {}: {}", path.string(), why));
  }
  std::lock_guard lock(mutex);
  return loaded.emplace(key, std::move(module)).first->second;
}

}  // namespace ktune::tuner::emu
