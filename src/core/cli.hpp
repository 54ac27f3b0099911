// The suite's one rule for options in the environment: --min-bytes is MESHBENCH_MIN_BYTES.
// Every binary passes its CLI11 options through with_env() instead of naming variables by
// hand, so the variable and the flag cannot drift apart.
#pragma once

#include <CLI/CLI.hpp>

#include <cctype>
#include <string>

namespace meshbench::core {

inline std::string env_name(const std::string& long_name) {
  std::string s = "MESHBENCH_";
  for (char c : long_name) s += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Sets the option's environment variable from its first long name ("-n,--iters" gives
// MESHBENCH_ITERS; get_name() would give "-n,--iters").
inline CLI::Option* with_env(CLI::Option* o) {
  const auto& lnames = o->get_lnames();
  o->envname(env_name(lnames.empty() ? o->get_single_name() : lnames.front()));
  return o;
}

}  // namespace meshbench::core
