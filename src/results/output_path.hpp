// The output-file policy every binary shares, applied by world rank 0 before set-up, so a bad
// path costs nothing and every rank exits 2 together (comm::agree_or_throw):
// - -O FILE.h5 is never overwritten; --append adds a run to an existing results file (a file
//   HDF5 cannot open is refused) or starts a new one;
// - FILE.jsonl sits beside it, and a stray one from another run is never mixed into a new file;
// - missing folders are created, once, by rank 0 (every rank creating them raced);
// - the job holds an advisory lock on FILE.h5.lock from the check to its end, so a second job
//   writing the same file is refused with the holder's pid and host instead of corrupting it
//   or losing a run. The lock is fcntl's (POSIX record locks, which NFS and Lustre honour),
//   and the kernel releases it when the process ends, however it ends.
// Other outputs (--trace FILE, --export DIR) are checked for writing the same way.
// Not here: opening or writing the file (run_file.hpp).
#pragma once

#include <mpi.h>

#include <string>

namespace meshbench::results {

// FILE.jsonl beside FILE.h5 (FILE.other.jsonl beside any other name).
std::string jsonl_path(const std::string& h5);

// The claim of one -O file for this process (world rank 0). Movable, not copyable.
class OutputClaim {
 public:
  OutputClaim() = default;
  ~OutputClaim();  // removes FILE.h5.lock and releases the lock
  OutputClaim(OutputClaim&& o) noexcept;
  OutputClaim& operator=(OutputClaim&& o) noexcept;
  OutputClaim(const OutputClaim&) = delete;
  OutputClaim& operator=(const OutputClaim&) = delete;

  // Applies the rules above to `path` and takes the lock. Empty when the claim holds,
  // otherwise one line naming -O/--output, the path and the rule (nothing is held then).
  std::string claim(const std::string& path, bool append, const std::string& binary);
  bool held() const { return fd_ >= 0; }
  bool appending() const { return appending_; }  // --append onto a file that exists
  // The last claim failed on the disk, not on the options: no space, a quota, an I/O error.
  // docs/reliability.md: a full disk at create is exit 3 (a runtime fault), not exit 2.
  bool disk_fault() const { return disk_fault_; }

 private:
  void release();
  int fd_ = -1;
  std::string lock_path_;
  bool appending_ = false;
  bool disk_fault_ = false;
};

// Every rank of `comm` together, after rank 0's claim (`problem`: what claim() returned there,
// empty elsewhere): a disk fault ends every rank with core::OutputFault (exit 3), any other
// problem with core::UsageError (exit 2). Collective.
void agree_claim(MPI_Comm comm, const OutputClaim& claim, const std::string& problem);

// Empty when `option`'s file (`folder` false) or folder (`folder` true) `path` can be written,
// creating missing folders; otherwise one line naming the option, the path and why.
std::string writable_problem(const std::string& option, const std::string& path, bool folder);

}  // namespace meshbench::results
