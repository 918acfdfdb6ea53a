// Emulation modules: rendered kernel source compiled by the host C++
// compiler (with the host half of kt.cuh in front and one trampoline per
// kernel name expression behind) into a shared object, cached on disk under
// env::cache_dir()/emu/<hash>.so and loaded with dlopen.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "templates/common/kt_emu_abi.hpp"
#include "templates/family.hpp"

namespace ktune::tuner::emu {

/// A loaded module: entry points in Rendered::kernels order. Modules stay
/// loaded for the life of the process (they are small and shared).
struct Module {
  std::string path;                                   ///< the cached .so
  std::vector<std::string> kernel_names;              ///< name expressions
  std::vector<kt::emu::KernelEntryFn> kernels;        ///< trampolines
  std::vector<std::vector<std::size_t>> parameter_sizes;  ///< bytes of each kernel's parameters, in order
  std::vector<std::vector<templates::ArgKind>> parameter_kinds;  ///< and what each is
  kt::emu::CurrentSlotFn current_slot = nullptr;      ///< per-OS-thread "running thread" slot
  bool from_cache = false;                            ///< loaded without compiling
  void* handle = nullptr;                             ///< dlopen's
  std::size_t tls_bytes = 0;                          ///< its thread-local block: static __shared__ and the slot

  /// The calling OS thread's copy of the module's thread-local block (its
  /// static __shared__ variables and the running-thread slot), tls_bytes
  /// long; null before the thread first touched it (current_slot() does).
  unsigned char* thread_block() const;
  /// The address and bytes of the module's global variable `name` (a
  /// `__constant__` in the global namespace: kt_emu.hpp exports them); throws
  /// kInvalidInput where it has none.
  std::pair<unsigned char*, std::size_t> global(const std::string& name) const;
};

/// The full host translation unit for `rendered`: what is hashed and compiled.
std::string emulation_source(const templates::Rendered& rendered);

/// Compiler and options, e.g. "c++ -x c++ -std=c++20 -O1 ...".
std::string emulation_compile_options();

/// "rendered.cu:42" (or "matmul.cu:42", a kernel spec's file its #line
/// markers name): the line of the rendered source an instruction of a
/// loaded module at `pc` came from (the innermost such line where it was
/// inlined from one), by addr2line over the module's line tables; "" where
/// it cannot tell (no addr2line, no module there, a line of ktune's headers).
std::string source_line(const void* pc);

/// Throws kInvalidInput where every user may write to the emulation objects'
/// folder (env::emu_cache_dir()): anyone could have put code there.
/// load_module asks it (and the same of the object) before each load.
void check_object_folder();

/// Whether `name`, a file of the emulation objects' folder, is a compile's
/// source or object (tmp-<key>-<pid>-<n>.*) whose process is still running:
/// what `ktune cache clean` leaves.
bool compile_in_progress(const std::string& name);

/// Compiles (or finds in the disk cache) and loads `rendered`. Throws
/// Error(kCompile) with the compiler's log on failure, kInvalidInput where
/// the object or its folder may be written by every user.
std::shared_ptr<const Module> load_module(const templates::Rendered& rendered);

}  // namespace ktune::tuner::emu
