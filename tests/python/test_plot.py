"""scripts/plot's modules on small files written here (h5files.py): which figures it writes and
what they hold (series, bars, the colour bar's labels, scaling families, the timeline's panels),
and scripts/plot's exit codes."""
import os

import h5files
import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from meshbench import plans, plot_collectives, plot_steps, reader  # noqa: E402


def run(cli, capsys, *argv):
    rc = cli["plot"].main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err


@pytest.fixture
def saved(monkeypatch):
    """The figures plot functions save, kept instead of written."""
    figs = []
    monkeypatch.setattr(plt.Figure, "savefig", lambda fig, *a, **k: figs.append(fig))
    return figs


def assert_png(path, min_w=400, min_h=200):
    with open(path, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n", path
    img = mpimg.imread(path)
    assert img.shape[1] >= min_w and img.shape[0] >= min_h, (path, img.shape)
    assert len(np.unique(img.reshape(-1, img.shape[2]), axis=0)) > 20, f"{path} looks blank"


def test_collective_figures(cli, capsys, tmp_path):
    h5files.collective_file(str(tmp_path / "shm.h5"), tag="shm")
    h5files.collective_file(str(tmp_path / "tcp.h5"), tag="tcp-lo", scale=2.0)
    out = tmp_path / "plots"
    rc, written, _ = run(cli, capsys, tmp_path / "shm.h5", tmp_path / "tcp.h5", "-o", out)
    assert rc == 0
    names = [os.path.basename(p) for p in written]
    assert names == ["busbw.png", "latency.png", "heatmap-shm-2r-all_reduce-out-of-place-tp-r1.png",
                     "heatmap-tcp-lo-2r-all_reduce-out-of-place-tp-r1.png"]
    for p in written:
        assert_png(p, min_w=300, min_h=150)
    rc, written, err = run(cli, capsys, tmp_path, "-o", out, "--heatmaps", "1")
    assert rc == 0 and len(written) == 3 and "plot: 1 more heat maps left out (--heatmaps)" in err


def test_series_are_the_columns_that_differ(tmp_path):
    h5files.collective_file(str(tmp_path / "shm.h5"), tag="shm")
    h5files.collective_file(str(tmp_path / "tcp.h5"), tag="tcp-lo", scale=2.0)
    rows, _ = reader.load_collectives([str(tmp_path)])
    label = plot_collectives.series_labeller(rows)
    series = plot_collectives.split_series(rows, label)
    assert list(series) == ["shm", "tcp-lo"]
    assert [r["t_median"] for r in series["tcp-lo"]] == [2e-6, 6e-6]


def test_latency_band_and_heatmap_ratios(tmp_path, saved):
    path = str(tmp_path / "shm.h5")
    # per-rank times: rank 1 is 1.5x rank 0 at every size
    h5files.collective_file(path, samples=np.array([[[1.0, 1.5]] * 3, [[2.0, 3.0]] * 3]))
    rows, _ = reader.load_collectives([path], with_samples=True)
    plot_collectives.plot_lines(plt, rows, "/dev/null", "latency", "t")
    ax = saved[-1].axes[0]
    assert list(ax.get_lines()[0].get_ydata()) == pytest.approx([1.0, 3.0])  # us
    plot_collectives.plot_heatmap(plt, np, rows, "/dev/null")
    fig = saved[-1]
    assert fig.axes[0].images[0].get_array().tolist() == [[1.0, 1.0], [1.5, 1.5]]
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[1].yaxis.get_ticklabels()]
    assert labels[0] == "1x" and labels[-1] == "1.5x", labels


def test_step_figures(cli, capsys, tmp_path, saved):
    for plan, rs in (("dp1", [(0.2, 640.0)]), ("dp2", [(0.1, 1280.0), (0.12, 1100.0)]), ("tp2", [(0.3, 430.0)])):
        for i, (m, t) in enumerate(rs):
            h5files.plan_round(str(tmp_path / f"{plan}-{i}.h5"), plan, f"{plan}.{i}", m, t, f"2026-12-01T00:0{i}:00Z")
    runs, _ = reader.load_steps([str(tmp_path)])
    steps = plans.plan_rows(runs)
    groups = [g for g in plans.plan_groups(steps) if g["tokens"] is not None]
    # steps.png: one bar per plan, best tokens/s first; the parts add up to time.step per token
    plot_steps.plot_step_bars(plt, groups, "/dev/null", "")
    ax = saved[-1].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["dp2 m=2", "single m=2", "tp2 m=2"]
    tops = {}
    for b in ax.patches:
        x = round(b.get_x() + b.get_width() / 2)
        tops[x] = max(tops.get(x, 0.0), b.get_y() + b.get_height())
    assert tops[0] == pytest.approx(1e6 * 0.30 / (8 * 16))  # h5files.SPLIT: step 0.30 s, 8 x 16 tokens
    assert plot_steps.step_bar_parts(groups) == [("time.compute", "compute"), ("time.exposed.dp", "exposed dp"),
                                                 ("time.bubble", "bubble"), ("time.other", "other")]
    # scaling.png: single (1 rank) -> dp2 (2 ranks) is one family; tp2 has one rank count
    fams = plot_steps.scaling_families(groups, "dp")
    (key, members), = fams.items()
    assert key[1:] == ("shm", "single m=2") and [g["plan"] for g in members] == ["single m=2", "dp2 m=2"]
    plot_steps.plot_scaling(plt, fams, "dp", "/dev/null", "")
    line = saved[-1].axes[0].get_lines()[0]
    assert list(line.get_xdata()) == [1, 2] and list(line.get_ydata()) == [640.0, (1280.0 + 1100.0) / 2]
    # The command lists memory, steps and scaling, in that order (savefig is stubbed here)
    rc, written, _ = run(cli, capsys, tmp_path, "-o", tmp_path / "plots")
    assert rc == 0 and [os.path.basename(p) for p in written] == ["memory.png", "steps.png", "scaling.png"]


def test_memory_bars_are_the_worst_rank(tmp_path, saved):
    h5files.step_file(str(tmp_path / "z0.h5"), 0)
    runs, _ = reader.load_steps([str(tmp_path)])
    plot_steps.plot_memory(plt, plans.plan_rows(runs), "/dev/null", "")
    ax = saved[-1].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["dp2 m=2\n(rank 1)"]  # rank 1's optimizer is 1 B more
    assert sum(b.get_height() for b in ax.patches) == pytest.approx((400 + 200 + 801 + 50 + 10) / 1024)
    assert ax.get_ylabel() == "peak bytes on the worst rank (KiB)"


def test_timeline(cli, capsys, tmp_path, saved):
    h5files.pipeline_file(str(tmp_path / "gpipe.h5"))
    rc, written, _ = run(cli, capsys, "--timeline", tmp_path / "gpipe.h5", "-o", tmp_path / "tl")
    assert rc == 0 and written == [str(tmp_path / "tl" / "timeline.png")]
    fig = saved[-1]
    assert len(fig.axes) == 2  # one run's stages, the memory panel
    assert fig.axes[0].get_title(loc="left") == "pp2 gpipe m=2: theory bubble 33%"
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["stage 0 (rank 0)", "stage 1 (rank 1)"]
    assert [t.get_text() for t in fig.axes[0].texts if t.get_text().startswith("bubble")] == ["bubble 25%", "bubble 40%"]
    assert max(max(line.get_ydata()) for line in fig.axes[1].get_lines()) == 2.0  # MiB held at most


def test_exit_codes(cli, capsys, tmp_path):
    h5files.collective_file(str(tmp_path / "shm.h5"))
    rc, written, err = run(cli, capsys, tmp_path / "shm.h5", "--where", "tag=none", "-o", tmp_path / "p")
    assert (rc, written) == (1, []) and "nothing to plot" in err and not (tmp_path / "p").exists()
    rc, _, err = run(cli, capsys, tmp_path / "shm.h5", "--where", "bogus=1", "-o", tmp_path / "p")
    assert rc == 2 and "unknown column 'bogus'" in err
    rc, _, err = run(cli, capsys, "--timeline", tmp_path / "shm.h5", "-o", tmp_path / "p")
    assert rc == 1 and "--timeline: no pipeline run" in err
    bad = tmp_path / "bad.h5"
    bad.write_text("no")
    rc, written, err = run(cli, capsys, tmp_path / "shm.h5", bad, "-o", tmp_path / "p")
    assert rc == 1 and len(written) == 3 and f"plot: cannot read {bad}" in err


def four_rank_pipeline(path, order):
    """pp=2 x dp=2 pipeline passes for ranks 0..3, with topology/groups as step_bench writes them
    for `order` (default tp-cp-ep-dp-pp: rank = dp + 2 pp; tp-cp-ep-pp-dp: rank = pp + 2 dp)."""
    import h5py
    h5files.pipeline_file(path)
    pp_first = order.endswith("-dp")
    pp_groups = [[0, 1], [2, 3]] if pp_first else [[0, 2], [1, 3]]
    dp_groups = [[0, 2], [1, 3]] if pp_first else [[0, 1], [2, 3]]
    groups = [(b"pp", i, 2, ",".join(map(str, g)).encode(), 1, b"intra") for i, g in enumerate(pp_groups)]
    groups += [(b"dp", i, 2, ",".join(map(str, g)).encode(), 1, b"intra") for i, g in enumerate(dp_groups)]
    with h5py.File(path, "a") as f:
        run = f["runs/pp"]
        run["topology/groups"] = np.array(groups, h5files.GROUPS_T)
        run["topology/group_members"] = np.array(pp_groups + dp_groups, dtype="<i4")
        s = run["step"]
        passes = s["passes"][()]  # one pipeline's, its ranks 0 and 1 being stages 0 and 1
        del s["passes"]
        copies = []
        for members in pp_groups:  # the same passes in each pipeline, on the rank at each stage
            c = passes.copy()
            c["rank"] = [members[p] for p in passes["rank"]]
            copies.append(c)
        both = np.concatenate(copies)
        s["passes"] = both
        s.attrs["order"] = order
        s.attrs["degrees"] = '{"dp": 2, "tp": 1, "pp": 2, "cp": 1, "ep": 1}'


@pytest.mark.parametrize("order, want", [
    ("tp-cp-ep-pp-dp", ["stage 0 \u00b7 dp 0 (rank 0)", "stage 0 \u00b7 dp 1 (rank 2)",
                        "stage 1 \u00b7 dp 0 (rank 1)", "stage 1 \u00b7 dp 1 (rank 3)"]),
    ("tp-cp-ep-dp-pp", ["stage 0 \u00b7 dp 0 (rank 0)", "stage 0 \u00b7 dp 1 (rank 1)",
                        "stage 1 \u00b7 dp 0 (rank 2)", "stage 1 \u00b7 dp 1 (rank 3)"]),
])
def test_timeline_rows_are_stages_and_dp_from_the_groups(cli, capsys, tmp_path, saved, order, want):
    """pp=2 x dp=2: four rows labelled with each rank's stage and dp index as topology/groups
    store them (was "stage 0..3 (rank 0..3)"), in stage order; without a topology the rows name
    only the ranks."""
    from meshbench import plot_timeline
    path = str(tmp_path / "pp.h5")
    four_rank_pipeline(path, order)
    (pr,) = reader.load_steps([path])[0]
    assert pr["groups"][0][0] == "pp" and len(pr["groups"]) == 4
    assert [lab for _, lab in plot_timeline.stage_rows(pr, {0, 1, 2, 3})] == want
    rc, _, err = run(cli, capsys, "--timeline", path, "-o", tmp_path / "tl")
    assert rc == 0, err
    ax = saved[0].axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == want
    no_topology = dict(pr, groups=[])
    assert [lab for _, lab in plot_timeline.stage_rows(no_topology, {0, 1, 2, 3})] == [
        "rank 0", "rank 1", "rank 2", "rank 3"]  # pp 2 of 4 ranks: which rank is which stage is not known


def test_zero_busbw_is_left_off_the_log_axis_and_titles_fit(tmp_path, saved):
    """A busbw of 0 (all_to_allv with nothing sent off-rank) is a gap in its line, not a point
    dropping off the log axis; steps.png's long title is wrapped to stay inside the figure (it was
    clipped at both sides)."""
    path = str(tmp_path / "a2av.h5")
    h5files.timed_collective_file(path, sizes=[8, 16384, 65536], times=[1e-6, 2e-6, 4e-6], collective="all_to_allv")
    rows, _ = reader.load_collectives([path])
    rows[1]["busbw"] = 0.0
    plot_collectives.plot_lines(plt, rows, "/dev/null", "busbw", "t")
    y = saved[-1].axes[0].get_lines()[0].get_ydata()
    assert np.isnan(y[1]) and y[0] > 0 and y[2] > 0
    h5files.plan_round(str(tmp_path / "dp2.h5"), "dp2", "dp2.0", 0.1, 1280.0, "2026-12-01T00:00:00Z")
    groups = [g for g in plans.plan_groups(plans.plan_rows(reader.load_steps([str(tmp_path / "dp2.h5")])[0]))
              if g["tokens"] is not None]
    plot_steps.plot_step_bars(plt, groups, "/dev/null", "a sweep's title: ")
    fig = saved[-1]
    fig.canvas.draw()
    title = fig.axes[0].title
    assert "\n" in title.get_text()
    box, page = title.get_window_extent(fig.canvas.get_renderer()), fig.bbox
    assert box.x0 >= page.x0 and box.x1 <= page.x1, (box, page)
