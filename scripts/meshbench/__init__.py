"""meshbench: the Python side of the suite. scripts/sweep, scripts/report, scripts/plot and
scripts/calibrate are thin entry points (their flags and a call); what they do lives here,
shared with torch_step_bench.py, and is unit-tested by tests/python (pytest).

Reading results (no I/O but reading HDF5; no printing):
  reader             the one reader of meshbench HDF5 files (docs/results.md): plain tables
                     (lists of dicts, numpy arrays for samples and step times) of collectives
                     and of step runs
  tables             filters, sorting and size formatting over those tables
  plans              the step runs as parallel plans: plan label, exposed time per dimension,
                     bubble, peak memory over ranks, groups across nodes, rounds grouped;
                     scripts/sweep's failed step points
  spread             medians, their intervals and printing to the precision of the spread
  names              binary, collective, mesh-dimension and group-kind names, read from the
                     binaries (`mesh_info --list-json`) instead of copied from the C++

scripts/sweep:
  sweep              the command (run) and its --help text
  sweep_config       the TOML, its keys and defaults, fabric presets, meshes, rounds, step flags
  steps              the plans of a step sweep, enumerated and asked of `step_bench --plan-only`,
                     pruned with a reason and a category
  expand             a sweep document -> its points
  launch             one run of a point: command line, process, record
  rounds             the local loop: interleaved rounds, resume, summary, report and plots after
  slurm              job arrays per rank count and round, waiting, --run-point inside a job

scripts/report:
  report             the command (run) and its --help text
  report_format      Markdown, CSV, JSON
  report_collectives the collective table, --compare, --expect-order
  report_steps       the step table, ZeRO stages side by side, per tensor-parallel degree
  report_plans       the plan ranking and step --compare
  regression         --baseline: verdicts with their spread

scripts/plot:
  plot               the command (run) and its --help text
  plot_collectives   busbw.png, latency.png, heat maps
  plot_steps         memory.png, steps.png, scaling.png
  plot_timeline      --timeline

scripts/calibrate (docs/predict.md):
  calibrate          the command (run), its --help text, the calibration file (write, read)
  fit                piecewise Hockney fits (numpy), their held-out error, predict()
  plot_fits          --plot: fits.png, fit-errors.png

Not a plotting or reporting library for other programs. Standard library, h5py, numpy and
matplotlib only (Debian's /usr/bin/python3; h5py is imported on first read and matplotlib on
the first plot, so `--help` works without them). The scripts put this folder's parent on
sys.path relative to their own __file__, so they run from any working directory.
"""
