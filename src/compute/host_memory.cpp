// host_memory_available() (device.hpp): what a run may still allocate on this host, read from
// the kernel (MemAvailable) and, under a cgroup v2 limit (a Slurm job, a container), from
// the limit less the cgroup's usage, whichever is smaller.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "compute/device.hpp"

namespace meshbench::compute {
namespace {

// The first number in `path`, or -1 ("max", missing, unreadable).
long long read_number(const std::string& path) {
  std::ifstream f(path);
  long long v = -1;
  if (!(f >> v)) return -1;
  return v;
}

// This process's cgroup v2 folder ("0::/slurm/uid_0/job_12" -> /sys/fs/cgroup/slurm/...).
std::string cgroup_dir() {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  return "";
}

}  // namespace

std::size_t host_memory_available() {
  long long avail = -1;
  std::ifstream mi("/proc/meminfo");
  std::string key;
  long long kib = 0;
  std::string unit;
  while (mi >> key >> kib) {
    std::getline(mi, unit);
    if (key == "MemAvailable:") {
      avail = kib * 1024;
      break;
    }
  }
  // The cgroup's limit and usage, walking up: a limit may be set on a parent.
  for (std::string dir = cgroup_dir(); !dir.empty() && dir.size() >= std::string("/sys/fs/cgroup").size();) {
    const long long limit = read_number(dir + "/memory.max"), used = read_number(dir + "/memory.current");
    if (limit > 0 && used >= 0) {
      const long long left = limit > used ? limit - used : 0;
      avail = avail < 0 ? left : std::min(avail, left);
    }
    const auto slash = dir.find_last_of('/');
    if (slash == std::string::npos || dir == "/sys/fs/cgroup") break;
    dir = dir.substr(0, slash);
  }
  return avail < 0 ? 0 : static_cast<std::size_t>(avail);
}

}  // namespace meshbench::compute
