#include "core/units.hpp"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <limits>

namespace meshbench::core {

std::optional<std::uint64_t> parse_size(std::string_view text) {
  std::uint64_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || ptr == first) return std::nullopt;
  std::string suffix;
  for (const char* p = ptr; p != last; ++p) suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
  int shift = 0;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      case 'B': shift = -1; break;
      default: return std::nullopt;
    }
    std::string rest = shift < 0 ? suffix.substr(1) : suffix.substr(1);
    if (shift < 0) {
      if (!rest.empty()) return std::nullopt;
      shift = 0;
    } else if (!(rest.empty() || rest == "B" || rest == "IB")) {
      return std::nullopt;
    }
  }
  if (shift > 0 && value > (std::numeric_limits<std::uint64_t>::max() >> shift)) return std::nullopt;
  return value << shift;
}

std::string format_size(std::uint64_t bytes) {
  static constexpr const char* kSuffix[] = {"", "K", "M", "G", "T"};
  int i = 0;
  std::uint64_t v = bytes;
  while (v >= 1024 && v % 1024 == 0 && i < 4) {
    v /= 1024;
    ++i;
  }
  return std::to_string(v) + kSuffix[i];
}

std::string human_bytes(double b) {
  static constexpr const char* kUnit[] = {"B", "KiB", "MiB", "GiB"};
  int i = 0;
  while (b >= 1024 && i < 3) {
    b /= 1024;
    ++i;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, kUnit[i]);
  return buf;
}

double gb_per_s(double bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0.0; }

}  // namespace meshbench::core
