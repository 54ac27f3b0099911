#include "results/output_path.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/core.h>

#include <climits>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "comm/agree.hpp"
#include "results/h5.hpp"
#include "results/run_context.hpp"

namespace meshbench::results {

namespace fs = std::filesystem;

namespace {

// The system's limits on a path, checked before any call that would fail on them (or throw:
// std::filesystem does on ENAMETOOLONG where no error_code is passed). "" or the rule broken.
// `suffix`: the bytes the suite appends to the file's name (FILE.h5.hang-rank<R>.json).
std::string name_problem(const std::string& path, size_t suffix) {
  const long got = ::pathconf(".", _PC_NAME_MAX);
  const size_t name_max = got > 0 ? static_cast<size_t>(got) : 255;
  const auto note = [&] { return suffix ? fmt::format(", less the {} bytes of the names meshbench adds beside it", suffix) : std::string(); };
  if (path.size() + suffix >= PATH_MAX)
    return fmt::format("the path is {} bytes long; the limit is {} (PATH_MAX {}{})", path.size(),
                       PATH_MAX - 1 - suffix, PATH_MAX - 1, note());
  const fs::path p(path);
  for (const auto& part : p) {
    const size_t extra = part == p.filename() ? suffix : 0;
    if (part.native().size() + extra > name_max)
      return fmt::format("a name in the path is {} bytes long; the limit is {} (NAME_MAX {}{})", part.native().size(),
                         name_max - extra, name_max, extra ? note() : std::string());
  }
  return "";
}

// Creates the folder holding `p` if missing; "" or why not.
std::string make_parent(const fs::path& p) {
  if (!p.has_parent_path()) return "";
  std::error_code ec;
  const fs::path dir = p.parent_path();
  if (fs::is_directory(dir, ec)) return "";
  if (fs::exists(dir, ec)) return fmt::format("{} is not a folder", dir.string());
  fs::create_directories(dir, ec);
  if (ec && !fs::is_directory(dir, ec)) return fmt::format("cannot create folder {}: {}", dir.string(), ec.message());
  return "";
}

std::string host() {
  char h[256] = {};
  ::gethostname(h, sizeof h - 1);
  return h;
}

// What the lock file says about its holder ("pid 12 on host n1 since ..."), or a placeholder.
std::string holder_of(int fd) {
  char buf[512] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? std::string("another process (it has not written its name yet)") : s;
}

}  // namespace

std::string jsonl_path(const std::string& h5) {
  fs::path p(h5);
  return (p.extension() == ".h5" ? p.replace_extension(".jsonl") : fs::path(h5 + ".jsonl")).string();
}

OutputClaim::~OutputClaim() { release(); }

OutputClaim::OutputClaim(OutputClaim&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), lock_path_(std::move(o.lock_path_)), appending_(o.appending_) {}

OutputClaim& OutputClaim::operator=(OutputClaim&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = std::exchange(o.fd_, -1);
    lock_path_ = std::move(o.lock_path_);
    appending_ = o.appending_;
  }
  return *this;
}

void OutputClaim::release() {
  if (fd_ < 0) return;
  ::unlink(lock_path_.c_str());  // while still locked: a waiter re-checks the inode it locked
  ::close(fd_);
  fd_ = -1;
}

std::string OutputClaim::claim(const std::string& path, bool append, const std::string& binary) {
  release();
  disk_fault_ = false;
  const fs::path p(path);
  std::error_code ec;
  auto rule = [&](const std::string& why) { return fmt::format("-O/--output {}: {}", path, why); };
  if (path.empty()) return rule("empty path");
  // the longest name written beside it: FILE.h5.hang-rank<R>.json, R up to 6 digits
  if (std::string why = name_problem(path, std::string(".hang-rank999999.json").size()); !why.empty()) return rule(why);
  if (fs::is_directory(p, ec)) return rule("is a folder (give a file name such as results.h5)");
  if (std::string why = make_parent(p); !why.empty()) return rule(why);

  // The lock first, so the checks below see no other writer's half-made state.
  lock_path_ = path + ".lock";
  for (int attempt = 0; attempt < 8 && fd_ < 0; ++attempt) {
    const int fd = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      disk_fault_ = errno == ENOSPC || errno == EDQUOT || errno == EIO;
      return rule(fmt::format("cannot create the lock file {}: {} (the folder must be writable)", lock_path_,
                              std::strerror(errno)));
    }
    struct flock fl{};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (::fcntl(fd, F_SETLK, &fl) != 0) {
      const int e = errno;
      const std::string who = holder_of(fd);
      ::close(fd);
      if (e == EACCES || e == EAGAIN)
        return rule(fmt::format("in use by {}; a results file takes one writer at a time: wait for that run to "
                                "end, or write another file (scripts/report reads several)",
                                who));
      return rule(fmt::format("cannot lock {}: {}", lock_path_, std::strerror(e)));
    }
    // The holder before us may have removed the file after we opened it: lock the one on disk.
    struct stat on_disk{}, mine{};
    if (::stat(lock_path_.c_str(), &on_disk) != 0 || ::fstat(fd, &mine) != 0 || on_disk.st_ino != mine.st_ino ||
        on_disk.st_dev != mine.st_dev) {
      ::close(fd);
      continue;
    }
    fd_ = fd;
  }
  if (fd_ < 0) return rule(fmt::format("could not take the lock {} (it kept changing)", lock_path_));
  const std::string me = fmt::format("{} (pid {} on host {} since {})\n", binary, ::getpid(), host(), utc_now_iso());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int e = errno;
    disk_fault_ = e == ENOSPC || e == EDQUOT || e == EIO;
    const std::string why = std::strerror(e);
    release();
    return rule(fmt::format("cannot write the lock file {}: {}", lock_path_, why));
  }

  auto refuse = [&](const std::string& why) {
    release();
    return rule(why);
  };
  const bool there = fs::exists(p, ec);
  if (there && !append) return refuse("the file exists; meshbench never overwrites (choose a new name, or add --append)");
  if (!there && fs::exists(jsonl_path(path), ec))
    return refuse(fmt::format("{} exists from another run; meshbench never mixes runs (choose a new name)", jsonl_path(path)));
  if (there && ::access(path.c_str(), R_OK) != 0)
    return refuse(fmt::format("cannot read it to append: {}", std::strerror(errno)));
  if (there && !is_hdf5(path))
    return refuse("not an HDF5 file (--append adds a run to a meshbench results file)");
  // A publish that died before its rename left this; the lock says no one is writing it.
  std::remove((path + ".partial").c_str());
  appending_ = there;
  return "";
}

void agree_claim(MPI_Comm comm, const OutputClaim& claim, const std::string& problem) {
  const bool disk = !problem.empty() && claim.disk_fault();
  comm::agree_on_fault(comm, disk ? problem : std::string());
  comm::agree_or_throw(comm, disk ? std::string() : problem);
}

std::string writable_problem(const std::string& option, const std::string& path, bool folder) {
  const fs::path p(path);
  std::error_code ec;
  auto rule = [&](const std::string& why) { return fmt::format("{} {}: {}", option, path, why); };
  if (path.empty()) return rule("empty path");
  if (std::string why = name_problem(path, 0); !why.empty()) return rule(why);
  if (folder) {
    if (fs::exists(p, ec) && !fs::is_directory(p, ec)) return rule("exists and is not a folder");
    if (!fs::exists(p, ec)) {
      fs::create_directories(p, ec);
      if (ec && !fs::is_directory(p, ec)) return rule(fmt::format("cannot create the folder: {}", ec.message()));
    }
    if (::access(path.c_str(), W_OK) != 0) return rule(fmt::format("cannot write into the folder: {}", std::strerror(errno)));
    return "";
  }
  if (fs::is_directory(p, ec)) return rule("is a folder (give a file name)");
  if (std::string why = make_parent(p); !why.empty()) return rule(why);
  if (fs::exists(p, ec)) {
    if (::access(path.c_str(), W_OK) != 0) return rule(fmt::format("cannot write it: {}", std::strerror(errno)));
    return "";
  }
  // Probe: create and remove it.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return rule(fmt::format("cannot create it: {}", std::strerror(errno)));
  ::close(fd);
  ::unlink(path.c_str());
  return "";
}

}  // namespace meshbench::results
