#include "results/output_path.hpp"

#include <fmt/core.h>

#include <filesystem>
#include <system_error>

namespace meshbench::results {

namespace fs = std::filesystem;

std::string jsonl_path(const std::string& h5) {
  fs::path p(h5);
  return (p.extension() == ".h5" ? p.replace_extension(".jsonl") : fs::path(h5 + ".jsonl")).string();
}

std::string output_problem(const std::string& path, bool append) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::exists(p) && !append)
    return fmt::format("-O/--output {}: the file exists; meshbench never overwrites (choose a new name, or add --append)",
                       path);
  if (!fs::exists(p) && fs::exists(jsonl_path(path)))
    return fmt::format("-O/--output {}: {} exists from another run; meshbench never mixes runs (choose a new name)",
                       path, jsonl_path(path));
  if (p.has_parent_path() && !fs::exists(p.parent_path()) && !fs::create_directories(p.parent_path(), ec))
    return fmt::format("-O/--output {}: cannot create folder {}: {}", path, p.parent_path().string(), ec.message());
  return "";
}

}  // namespace meshbench::results
