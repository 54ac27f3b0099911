// The suite's one rule for options in the environment: --min-bytes is MESHBENCH_MIN_BYTES.
// Every binary passes its CLI11 options through with_env() instead of naming variables by
// hand, so the variable and the flag cannot drift apart.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "core/error.hpp"

namespace meshbench::core {

// The one rule of every option in seconds (--op-timeout, --time-limit, ...): a finite number
// >= 0, 0 meaning `zero_means`. NaN and inf are refused with the same words as a negative value.
inline void check_seconds(const char* flag, double v, const char* zero_means) {
  if (!(v >= 0) || !std::isfinite(v))
    throw UsageError(fmt::format("{} {}: must be a finite number of seconds >= 0 (0: {})", flag, v, zero_means));
}

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

// The options whose value came from their environment variable rather than the command line:
// each option's flags ("--warmup", "-n") and "VAR=value".
struct EnvSource {
  std::vector<std::string> flags;
  std::string setting;  // MESHBENCH_WARMUP=auto
};
using EnvSources = std::vector<EnvSource>;

inline EnvSources env_sources(const CLI::App& app, int argc, char** argv) {
  auto on_command_line = [&](const std::string& flag) {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == flag || a.rfind(flag + "=", 0) == 0 || (flag.size() == 2 && a.rfind(flag, 0) == 0)) return true;
    }
    return false;
  };
  EnvSources out;
  for (const CLI::Option* o : app.get_options()) {
    const std::string& var = o->get_envname();
    const char* value = var.empty() ? nullptr : std::getenv(var.c_str());
    if (!value) continue;
    EnvSource src{{}, var + "=" + value};
    bool typed = false;
    for (const auto& l : o->get_lnames()) src.flags.push_back("--" + l);
    for (const auto& f : o->get_snames()) src.flags.push_back("-" + f);
    for (const auto& f : src.flags) typed = typed || on_command_line(f);
    if (!typed) out.push_back(std::move(src));
  }
  return out;
}

// Whether the option named by `flag` ("--max-bytes", "-e") took its value from its environment
// variable rather than the command line.
inline bool from_env(const EnvSources& sources, const std::string& flag) {
  for (const EnvSource& s : sources)
    if (std::find(s.flags.begin(), s.flags.end(), flag) != s.flags.end()) return true;
  return false;
}

// `message` (an error about the options) with the setting of every option it names that came
// from the environment appended: "--warmup = auto (from the environment: MESHBENCH_WARMUP=auto)",
// so a bad value in an sbatch file names the variable instead of a flag nobody typed.
inline std::string note_env(const EnvSources& sources, const std::string& message) {
  std::string notes;
  for (const EnvSource& s : sources) {
    bool named = false;
    for (const auto& f : s.flags) {
      const size_t at = message.find(f);
      // "--seq" must not match inside "--sequence": the flag ends at a non-name character.
      named = named || (at != std::string::npos &&
                        (at + f.size() == message.size() || !(std::isalnum(static_cast<unsigned char>(message[at + f.size()])) ||
                                                              message[at + f.size()] == '-')));
    }
    if (named) notes += (notes.empty() ? "" : ", ") + s.setting;
  }
  return notes.empty() ? message : message + " (from the environment: " + notes + ")";
}

// Edits between two words (Levenshtein), for the nearest-flag hint below.
inline std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// CLI11's message for a parse error, with the nearest flag named for each unknown one:
// "--mdoel: unknown option; did you mean --model?" instead of "The following arguments were not
// expected: small --mdoel". A flag is suggested within 2 edits or a third of its length.
inline std::string parse_message(const CLI::App& app, const CLI::ParseError& e) {
  const auto* extras = dynamic_cast<const CLI::ExtrasError*>(&e);
  if (!extras) return e.what();
  std::vector<std::string> unknown;
  std::string hints;
  for (const std::string& word : app.remaining()) {
    if (word.rfind("-", 0) != 0 || word == "-" || word == "--") continue;
    const std::string flag = word.substr(0, word.find('='));
    std::string best;
    std::size_t best_d = std::string::npos;
    for (const CLI::Option* o : app.get_options()) {
      std::vector<std::string> names;
      for (const auto& l : o->get_lnames()) names.push_back("--" + l);
      for (const auto& n : names) {
        const std::size_t d = edit_distance(flag, n);
        if (d < best_d) {
          best_d = d;
          best = n;
        }
      }
    }
    const std::size_t limit = std::max<std::size_t>(2, flag.size() / 3);
    hints += (hints.empty() ? "" : "; ") + flag + ": unknown option" +
             (best_d <= limit ? "; did you mean " + best + "?" : std::string());
  }
  if (hints.empty()) return e.what();
  return hints + " (" + e.what() + "; see --help)";
}

}  // namespace meshbench::core
