// Reporters turn finished records into output; they never time or call communicators.
// They live on world rank 0, which holds the records the driver gathered there; error()
// holds the first failure to write (a full disk), for the driver to end the run with.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "results/record.hpp"
#include "results/run_context.hpp"

namespace meshbench::results {

class Reporter {
 public:
  virtual ~Reporter() = default;
  virtual void begin_run(const RunContext&, const std::vector<GroupInfo>&) {}
  virtual void begin_block(const Block&) {}
  virtual void row(const Block&, const Row&) {}
  virtual void end_block(const Block&) {}
  // Run attributes known only at the end (e.g. clock offsets re-estimated); the same values
  // on every rank.
  virtual void add_run_attrs(const nlohmann::ordered_json&) {}
  virtual void finish(RunStatus) {}
  // The first write error ("cannot write F.h5.partial: No space left on device"), or empty.
  virtual const std::string& error() const {
    static const std::string none;
    return none;
  }
};

class ConsoleReporter final : public Reporter {
 public:
  ConsoleReporter(int rank, bool quiet) : rank_(rank), quiet_(quiet) {}
  void begin_run(const RunContext& ctx, const std::vector<GroupInfo>& groups) override;
  void begin_block(const Block& b) override;
  void row(const Block& b, const Row& r) override;
  void end_block(const Block& b) override;
  void finish(RunStatus s) override;

  // The table text of one row, without printing (for golden tests).
  static std::string format_row(const Block& b, const Row& r);
  static std::string format_header(const Block& b);

 private:
  int rank_;
  bool quiet_;
  std::uint64_t wrong_total_ = 0;
  double best_busbw_ = 0;
  std::uint64_t best_bytes_ = 0;
  std::string best_what_;
  std::string rank_stat_ = "max";
  std::vector<std::string> not_converged_;  // "all_reduce 256 B out-of-place"
  long long invalid_ = 0, timed_ = 0;        // window timing: late starts dropped, calls kept
};

// One JSON object per point, appended to FILE.jsonl; a failed write is held in error().
class JsonLinesReporter final : public Reporter {
 public:
  explicit JsonLinesReporter(std::string path) : path_(std::move(path)) {}
  ~JsonLinesReporter() override;
  void begin_run(const RunContext& ctx, const std::vector<GroupInfo>&) override;
  void row(const Block& b, const Row& r) override;
  const std::string& error() const override { return error_; }

 private:
  std::string path_, error_;
  std::FILE* file_ = nullptr;
  nlohmann::ordered_json base_;
};

// Loads or creates the file in memory on construction (run_file.hpp).
class Hdf5Reporter final : public Reporter {
 public:
  // Opens (or, with `append`, adds to) the file, and makes ctx.run_id unique inside it
  // (-2, -3... when taken).
  Hdf5Reporter(const std::string& path, bool append, RunContext& ctx);
  ~Hdf5Reporter() override;
  void begin_run(const RunContext& ctx, const std::vector<GroupInfo>& groups) override;
  void begin_block(const Block& b) override;
  void row(const Block& b, const Row& r) override;
  void end_block(const Block& b) override;
  void add_run_attrs(const nlohmann::ordered_json& attrs) override;
  void finish(RunStatus s) override;
  const std::string& error() const override;
  const std::string& run_id() const { return run_id_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string run_id_;
};

}  // namespace meshbench::results
