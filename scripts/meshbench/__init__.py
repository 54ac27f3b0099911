"""meshbench: the Python side of the suite, shared by scripts/report, plot, sweep and
torch_step_bench.py.

  reader   the one reader of meshbench HDF5 files (results/README.md): plain tables (lists of
           dicts, numpy arrays for samples and step times) of collectives and of step runs
  tables   filters, sorting and size formatting over those tables (no HDF5, no I/O)
  plans    the step runs as parallel plans: plan label, exposed time per dimension, bubble,
           peak memory over ranks, groups across nodes; scripts/sweep's failed step points
  names    binary, collective, mesh-dimension and group-kind names, read from the binaries
           (`mesh_info --list-json`) instead of copied from the C++
  steps    the plans of a step sweep, enumerated and asked of `step_bench --plan-only`

Not a plotting or reporting library: report and plot stay scripts. Standard library, h5py and
numpy only (Debian's /usr/bin/python3; h5py is imported on first read, so `--help` works
without it). Scripts put this folder's parent on sys.path relative to their own __file__, so
they run from any working directory.
"""
