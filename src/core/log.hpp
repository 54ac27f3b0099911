// Rank-0 console output. Everything a user reads goes through here so that one line is
// printed once, not once per rank. Errors from any rank go to stderr unconditionally.
#pragma once

#include <fmt/core.h>

#include <cstdio>
#include <string>

namespace meshbench::core {

class Log {
 public:
  Log(int rank, bool quiet) : rank_(rank), quiet_(quiet) {}
  bool quiet() const { return quiet_; }

  // Table rows and headers: rank 0, unless --quiet.
  template <typename... Args>
  void out(fmt::format_string<Args...> f, Args&&... args) const {
    if (rank_ == 0 && !quiet_) emit(stdout, fmt::format(f, std::forward<Args>(args)...));
  }
  // Lines that --quiet keeps (the result location, the verdict): rank 0 only.
  template <typename... Args>
  void always(fmt::format_string<Args...> f, Args&&... args) const {
    if (rank_ == 0) emit(stdout, fmt::format(f, std::forward<Args>(args)...));
  }
  // Problems on rank 0: stderr.
  template <typename... Args>
  void warn(fmt::format_string<Args...> f, Args&&... args) const {
    if (rank_ == 0) emit(stderr, fmt::format(f, std::forward<Args>(args)...));
  }

 private:
  static void emit(std::FILE* to, const std::string& s) {
    std::fputs(s.c_str(), to);
    std::fflush(to);
  }
  int rank_;
  bool quiet_;
};

}  // namespace meshbench::core
