"""Learning curves: grouping runs by config, the mean and its band, the PNG."""

from __future__ import annotations

import sys

import numpy as np

from flowrl.apps.cli import main
from flowrl.apps.plotting import group_by_config, mean_and_band
from flowrl.run.logger import RunLogger


def fake_run(path, seed, lr=0.001, slope=1.0):
    """A run directory as flowrl train writes it, with a made-up learning curve."""
    log = RunLogger(path)
    log.write_json(
        "config.json", {"algo": "ppo", "config": {"env": "CartPole-v1", "seed": seed, "lr": lr}}
    )
    for i in range(1, 11):
        ret = slope * i * 10 + seed
        log.log(
            {
                "iteration": i,
                "env_steps_sampled": 1000 * i,
                "time_total_s": 2.0 * i,
                "episode_return_mean": ret,
            }
        )
    log.close()
    return path


def test_runs_that_differ_only_in_seed_form_one_group_named_by_what_differs():
    runs = {
        "a": {"algo": "ppo", "config": {"env": "E", "seed": 0, "lr": 0.1}},
        "b": {"algo": "ppo", "config": {"env": "E", "seed": 1, "lr": 0.1}},
        "c": {"algo": "ppo", "config": {"env": "E", "seed": 0, "lr": 0.2}},
    }
    assert group_by_config(runs) == ("ppo on E", {"lr=0.1": ["a", "b"], "lr=0.2": ["c"]})
    runs["d"] = {"algo": "dqn", "config": {"env": "E", "seed": 0, "lr": 0.1}}
    title, groups = group_by_config(runs)  # the algorithm differs: the labels name it
    assert title == "E" and groups["dqn"] == ["d"] and groups["ppo lr=0.2"] == ["c"]
    # settings another algorithm's config lacks or sets otherwise name no group
    runs["d"]["config"] |= {"n_step": 3, "lr": 0.5}
    assert group_by_config(runs)[1] == {"ppo lr=0.1": ["a", "b"], "ppo lr=0.2": ["c"], "dqn": ["d"]}
    assert group_by_config({"a": runs["a"]}) == ("ppo on E", {"ppo on E": ["a"]})


def test_mean_and_band_on_a_shared_grid():
    x = np.array([0.0, 10.0])
    grid, mean, band = mean_and_band([(x, np.array([0.0, 10.0])), (x, np.array([2.0, 12.0]))], 3)
    np.testing.assert_allclose(grid, [0, 5, 10])
    np.testing.assert_allclose(mean, [1, 6, 11])
    np.testing.assert_allclose(band, 12.706 * np.sqrt(2) / np.sqrt(2))  # t(1); std of {a, a+2}
    _, _, alone = mean_and_band([(x, x)], 3)
    assert not alone.any()


def test_plot_of_three_seeds_and_another_config_writes_a_png(tmp_path, capsys):
    import matplotlib.image

    runs = [str(fake_run(tmp_path / f"s{seed}", seed)) for seed in range(3)]
    runs.append(str(fake_run(tmp_path / "other", 0, lr=0.01, slope=0.5)))
    out = tmp_path / "plots" / "curves.png"
    assert main(["plot", *runs, "--out", str(out)]) == 0
    assert "wrote the curves of 4 runs" in capsys.readouterr().out
    image = matplotlib.image.imread(out)
    assert image.shape[0] > 300 and image.shape[1] > 800  # two panels side by side


def test_plot_without_out_writes_curves_png_here(tmp_path, capsys, monkeypatch):
    run = fake_run(tmp_path / "s0", 0)
    monkeypatch.chdir(tmp_path)
    assert main(["plot", str(run)]) == 0
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert "to curves.png" in capsys.readouterr().out


def test_plot_without_the_plot_extra_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    """It was "ModuleNotFoundError: No module named 'matplotlib'" with exit 1."""
    run = fake_run(tmp_path / "s0", 0)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # not installed, as import sees it
    assert main(["plot", str(run), "--out", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["flowrl: error: drawing curves needs matplotlib: pip install 'flowrl-ray[plot]'"]


def test_plot_of_what_holds_runs_draws_them_and_counts_runs_of_one_seed(tmp_path, capsys):
    """A sweep's output (flowrl tune's: its trials write their runs in TRIAL/flowrl) was
    "not a run directory"; runs of one seed in one curve were labelled "(2 seeds)"."""
    from flowrl.apps.plotting import _how_many, find_runs

    trials = [fake_run(tmp_path / "sweep" / "tune" / f"trial_{i}" / "flowrl", 0) for i in (0, 1)]
    assert main(["plot", str(tmp_path / "sweep"), "--out", str(tmp_path / "x.png")]) == 0
    assert "wrote the curves of 2 runs" in capsys.readouterr().out
    runs = {str(t): {"config": {"seed": 0}} for t in find_runs([tmp_path / "sweep"])}
    assert list(runs) == [str(t) for t in trials]
    assert _how_many(list(runs), runs) == " (2 runs)"
    assert _how_many(["a", "b"], {"a": {"config": {"seed": 0}}, "b": {"config": {"seed": 1}}}) == (
        " (2 seeds)"
    )


def test_plot_of_something_that_is_no_run_is_one_line(tmp_path, capsys):
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "is not a run directory" in err and err.count("\n") == 1


def test_a_run_without_results_yet_is_one_line(tmp_path, capsys):
    log = RunLogger(tmp_path / "empty")
    log.write_json("config.json", {"algo": "ppo", "config": {}})
    log.close()
    assert main(["plot", str(tmp_path / "empty"), "--out", str(tmp_path / "x.png")]) == 2
    assert "has no result with episode_return_mean yet" in capsys.readouterr().err


def test_the_band_is_students_t_interval_of_the_seeds_mean():
    """With 2-3 seeds a normal band (1.96 standard errors) is 3-6x too narrow."""
    from scipy import stats

    from flowrl.apps.plotting import mean_and_band, t_95

    for df in (1, 2, 3, 5, 10, 29, 30, 31, 60, 200):
        assert abs(t_95(df) - stats.t.ppf(0.975, df)) < 2e-3 * stats.t.ppf(0.975, df)
    x = np.array([0.0, 1.0])
    curves = [(x, np.array([0.0, 1.0])), (x, np.array([0.0, 3.0])), (x, np.array([0.0, 2.0]))]
    _, mean, band = mean_and_band(curves, points=2)
    assert mean[-1] == 2.0
    _, high = stats.t.interval(0.95, 2, loc=2.0, scale=stats.sem([1.0, 3.0, 2.0]))
    assert abs(band[-1] - (high - 2.0)) < 1e-3


def test_long_labels_fold_the_legend_into_fewer_columns_inside_the_figure():
    """Four runs whose configs differ in three settings each: four columns of their labels
    ran past both edges of the PNG, cutting every label (and one group) off."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from flowrl.apps.plotting import legend_below

    labels = [f"ppo num_envs_per_worker={n} rollout_fragment_length=128 train_batch_size=2048"
              for n in (8, 16, 32, 64)] + ["x" * 150]  # fmt: skip
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained")
    for label in labels:
        axes[0].plot([0, 1], [0, 1], label=label)
    legend_below(fig, axes[0])
    (legend,) = fig.legends
    extent = legend.get_window_extent(fig.canvas.get_renderer())
    assert extent.x0 >= 0 and extent.x1 <= fig.bbox.width
    assert len(legend.get_texts()) == 5 and legend.get_texts()[-1].get_text().count("\n") == 1
    plt.close(fig)
