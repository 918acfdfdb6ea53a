// Which ktune processes use one GPU at the same time. A kernel timed while
// another process runs kernels on the same GPU is slowed and spread by it,
// and a tuning session's winner then says more about the neighbour than
// about the kernel. So each process that opens a GPU marks it: a file
// ROOT-PID.lock in its user's folder (UID/, written by that user alone) in
// one named by the GPU's UUID, holding a line that names the process, locked
// (flock) while the process lives, so a mark left by a killed process is
// known for one and removed by the next look of its user. Every user's marks
// are read; one whose folder another user may write is not. A
// measurement names the other processes marked on its GPU
// (Measurement::shared_with) and a command says so. ROOT names the session:
// a token of the process's own (its pid and a random number, so processes
// of two containers sharing the folder never meet on one name), which a
// tuning session's worker processes take from the process that forked them
// (set_process_root): they are not each other's neighbours.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace ktune::tuner {

/// This process's session token: its own, made once per process (a forked
/// child makes its own), unless set_process_root gave it another.
std::string process_root();
/// Makes `root` (the parent's process_root(), read before the fork) this
/// process's: a tuning session's worker is one session with its parent.
void set_process_root(const std::string& root);

/// Appends to `names` (processes, as GpuMark::others names them) those of `more` it does not hold yet, in order:
/// the processes seen over several looks, each once.
void add_unseen(std::vector<std::string>& names, const std::vector<std::string>& more);

/// Every other process a GpuMark of this process has seen (GpuMark::others), in the order first seen: what a
/// benchmark's report names as having shared its GPU.
std::vector<std::string> others_seen();

/// The warning a command gives for `other`, a process that shared the GPU while it measured: what it did to the
/// times, and to `again` (a command, "tune") when it has finished or on another GPU.
std::string shared_gpu_warning(const std::string& other, const std::string& again);

/// Every process marked on the GPU `uuid` in `dir` now (whatever its session), as GpuMark::others names them; marks
/// whose process is gone are removed on the way. What `ktune devices` lists before a tuning session starts.
std::vector<std::string> marked_on(const std::filesystem::path& dir, const std::string& uuid);

/// This process's mark on one GPU, held while any GpuMark of that GPU lives
/// in the process (they share one file). A child forked meanwhile leaves it
/// to its parent.
class GpuMark {
 public:
  /// Marks the GPU `uuid` (DeviceInfo::uuid) in the folder `dir`
  /// (env::gpu_mark_dir()) for the session `root` (tests give another to
  /// stand for another process). Where the mark cannot be made at once (a
  /// folder that cannot be written), none is: the process runs unseen by
  /// others, and still sees them. An empty `dir` or `uuid` makes no mark
  /// and sees none. Never throws for the file system, and never waits for
  /// another process.
  GpuMark(const std::filesystem::path& dir, const std::string& uuid, const std::string& root = process_root());
  ~GpuMark();
  GpuMark(const GpuMark&) = delete;
  GpuMark& operator=(const GpuMark&) = delete;

  /// The processes of other sessions marked on this GPU now, each as its
  /// mark names it: "pid 4242 (ktune tune --family swiglu_fwd ...)". Marks
  /// whose process is gone are removed on the way (a session's own
  /// workers' too). Each is added to others_seen().
  std::vector<std::string> others() const;

 private:
  std::filesystem::path dir_;
  std::string uuid_;
  std::string name_;  // this process's mark's file name, where it holds one
  std::string root_;
  std::shared_ptr<void> held_;  // the lock, shared with this process's other marks of the GPU
};

}  // namespace ktune::tuner
