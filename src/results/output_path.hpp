// The output-file policy every binary shares: -O FILE.h5 is never overwritten (--append adds
// a run to an existing file, or starts a new one), a JSON-lines file sits beside it
// (FILE.jsonl), a stray FILE.jsonl from another run is never mixed into a new file, and
// missing folders are created. Not here: opening or writing the file (run_file.hpp).
#pragma once

#include <string>

namespace meshbench::results {

// FILE.jsonl beside FILE.h5 (FILE.other.jsonl beside any other name).
std::string jsonl_path(const std::string& h5);

// Empty when `path` may be written with or without --append (creating missing folders);
// otherwise the message naming -O/--output and the rule.
std::string output_problem(const std::string& path, bool append);

}  // namespace meshbench::results
