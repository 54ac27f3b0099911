"""tests/python/conftest.py: the package scripts/meshbench on sys.path, the entry points
(scripts/sweep, report, plot, calibrate) loaded as modules (cli), and the stand-in programs (fakes.py).

Run: python3 -m pytest -q tests/python (ctest: python.<module>, one entry per file). The tests need Debian's h5py, numpy
and matplotlib, not a build; the few that read the real binaries' names take MB_BIN (default
build/bin) and are skipped when it holds no mesh_info.
"""
import importlib.machinery
import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, HERE)

import fakes  # noqa: E402
from meshbench import names  # noqa: E402


def load_cli(name):
    """scripts/<name> (no .py) as a module: its parser() and main(argv)."""
    path = os.path.join(ROOT, "scripts", name)
    loader = importlib.machinery.SourceFileLoader(f"cli_{name}", path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def cli():
    return {n: load_cli(n) for n in ("sweep", "report", "plot", "calibrate")}


@pytest.fixture
def fake_bin(tmp_path):
    """A --bin folder of stand-ins (fakes.bin_dir); names.load's cache forgets it afterwards."""
    folder = fakes.bin_dir(str(tmp_path / "bin"))
    yield folder
    names._cache.pop(os.path.abspath(folder), None)


@pytest.fixture
def fake_tools(tmp_path, monkeypatch):
    """mpiexec, sbatch and squeue stand-ins first on PATH; returns {name: (path, log)}."""
    folder = tmp_path / "tools"
    folder.mkdir()
    out = {}
    for name, body in (("mpiexec", fakes.MPIEXEC), ("sbatch", fakes.SBATCH), ("squeue", fakes.SQUEUE)):
        out[name] = (fakes.write(str(folder), name, body), str(tmp_path / f"{name}.log"))
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    return out


@pytest.fixture
def real_bin():
    folder = os.environ.get("MB_BIN", os.path.join(ROOT, "build", "bin"))
    if not os.access(os.path.join(folder, "mesh_info"), os.X_OK):
        pytest.skip(f"no built mesh_info in {folder} (build first, or set MB_BIN)")
    return folder
