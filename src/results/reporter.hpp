// Reporters turn finished records into output; they never time or call communicators.
// Console and JSON lines write on rank 0; the HDF5 reporter is called on every rank
// because parallel HDF5 writes are collective.
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

class JsonLinesReporter final : public Reporter {
 public:
  JsonLinesReporter(std::string path, int rank) : path_(std::move(path)), rank_(rank) {}
  ~JsonLinesReporter() override;
  void begin_run(const RunContext& ctx, const std::vector<GroupInfo>&) override;
  void row(const Block& b, const Row& r) override;

 private:
  std::string path_;
  int rank_;
  std::FILE* file_ = nullptr;
  nlohmann::ordered_json base_;
};

// Opens or creates the file on construction (all ranks of `world`).
class Hdf5Reporter final : public Reporter {
 public:
  // Opens (or, with `append`, adds to) the file on every rank of `world`, and makes
  // ctx.run_id unique inside it (-2, -3... when taken).
  Hdf5Reporter(const std::string& path, bool append, MPI_Comm world, RunContext& ctx);
  ~Hdf5Reporter() override;
  void begin_run(const RunContext& ctx, const std::vector<GroupInfo>& groups) override;
  void begin_block(const Block& b) override;
  void row(const Block& b, const Row& r) override;
  void end_block(const Block& b) override;
  void add_run_attrs(const nlohmann::ordered_json& attrs) override;
  void finish(RunStatus s) override;
  const std::string& run_id() const { return run_id_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string run_id_;
};

}  // namespace meshbench::results
