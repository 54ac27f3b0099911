// Size parsing and formatting. Sizes accept 8, 64K, 128M, 1G (binary units, as nccl-tests),
// optionally followed by B or iB: 64KB and 64KiB both mean 65536 bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace meshbench::core {

// Returns nullopt for anything that is not a non-negative size.
std::optional<std::uint64_t> parse_size(std::string_view text);

// 8 -> "8", 65536 -> "64K" when exact, else plain bytes.
std::string format_size(std::uint64_t bytes);

// 1536 -> "1.50 KiB": two decimals in the largest binary unit up to GiB (memory tables).
std::string human_bytes(double bytes);

// Decimal GB/s of `bytes` moved in `seconds` (0 when seconds <= 0), as nccl-tests reports.
double gb_per_s(double bytes, double seconds);

}  // namespace meshbench::core
