#include "results/output_path.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/core.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "results/h5.hpp"
#include "results/run_context.hpp"

namespace meshbench::results {

namespace fs = std::filesystem;

namespace {

// Creates the folder holding `p` if missing; "" or why not.
std::string make_parent(const fs::path& p) {
  if (!p.has_parent_path()) return "";
  std::error_code ec;
  const fs::path dir = p.parent_path();
  if (fs::is_directory(dir, ec)) return "";
  if (fs::exists(dir, ec)) return fmt::format("{} is not a folder", dir.string());
  fs::create_directories(dir, ec);
  if (ec && !fs::is_directory(dir)) return fmt::format("cannot create folder {}: {}", dir.string(), ec.message());
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
  const fs::path p(path);
  std::error_code ec;
  auto rule = [&](const std::string& why) { return fmt::format("-O/--output {}: {}", path, why); };
  if (path.empty()) return rule("empty path");
  if (fs::is_directory(p, ec)) return rule("is a folder (give a file name such as results.h5)");
  if (std::string why = make_parent(p); !why.empty()) return rule(why);

  // The lock first, so the checks below see no other writer's half-made state.
  lock_path_ = path + ".lock";
  for (int attempt = 0; attempt < 8 && fd_ < 0; ++attempt) {
    const int fd = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      return rule(fmt::format("cannot create the lock file {}: {} (the folder must be writable)", lock_path_,
                              std::strerror(errno)));
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
    const std::string why = std::strerror(errno);
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

std::string writable_problem(const std::string& option, const std::string& path, bool folder) {
  const fs::path p(path);
  std::error_code ec;
  auto rule = [&](const std::string& why) { return fmt::format("{} {}: {}", option, path, why); };
  if (path.empty()) return rule("empty path");
  if (folder) {
    if (fs::exists(p, ec) && !fs::is_directory(p, ec)) return rule("exists and is not a folder");
    if (!fs::exists(p, ec)) {
      fs::create_directories(p, ec);
      if (ec && !fs::is_directory(p)) return rule(fmt::format("cannot create the folder: {}", ec.message()));
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
