"""`jaxcredit plot`'s figure reads on its own: the task in the title, fitted or exact credit in
the legend, which way is better on the y axis, the chance line of a probability of the optimal
action, the legend below the axes, and the format from the file's suffix."""

import matplotlib.pyplot as plt
import numpy as np
import pytest

from jaxcredit import cli, plotting, runlog


def _fake_run(folder, estimator, options, values):
    """A run directory with one metric over 3 updates for 2 seeds (runlog's own writer)."""
    folder.mkdir()
    runlog.write_json(folder / "config.json", {"config": {
        "env": "DelayedEffect", "env_options": {"n": 30, "sigma": 1.0}, "algo": "a2c",
        "estimator": {"name": estimator, "options": options}}, "settings": [{}], "swept": []})
    writer = runlog.MetricsWriter(folder, ["eval/p_optimal_first_action"])
    p = np.asarray(values)[None, :] + 0.01 * np.arange(2)[:, None]  # [seeds, updates]
    writer.append({"eval/p_optimal_first_action": p}, hparam_index=np.zeros(2),
                  seed_index=np.arange(2), first_update=0, steps_per_update=124)


def test_a_figure_names_its_task_credit_direction_and_chance(tmp_path, monkeypatch):
    _fake_run(tmp_path / "fitted", "hca_return", {}, [0.5, 0.6, 0.7])
    _fake_run(tmp_path / "exact", "hca_return", {"model": "oracle"}, [0.6, 0.9, 1.0])
    saved = {}
    monkeypatch.setattr(plt, "close", lambda fig: saved.setdefault("fig", fig))
    out = plotting.plot_runs([tmp_path / "fitted", tmp_path / "exact"], tmp_path / "p.svg",
                             "eval/p_optimal_first_action", chance=cli.chance_level)
    assert out.read_text().lstrip().startswith("<?xml")  # the suffix picks the format
    ax = saved["fig"].axes[0]
    assert ax.get_title().startswith("DelayedEffect n=30 sigma=1, a2c\n")
    assert ax.get_ylabel().endswith("(↑ better)")
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["fitted [hca_return, fitted] (n=2)", "exact [hca_return, exact model] (n=2)",
                      "chance (0.5)"]
    chance = [line for line in ax.get_lines() if line.get_label() == "chance (0.5)"]
    assert len(chance) == 1 and np.allclose(chance[0].get_ydata(), 0.5)
    # The legend hangs below the axes, where no curve is.
    assert ax.get_legend().get_bbox_to_anchor().y0 < ax.get_window_extent().y0


@pytest.mark.parametrize("metric, expected", [
    ("eval/return", "↑ better"), ("credit/error_fitted", "↓ better"), ("loss", "↓ better"),
    ("eval/p_optimal_first_action", "↑ better"), ("approx_kl", "↓ better"), ("clip_frac", "")])
def test_the_better_direction_of_a_metric(metric, expected):
    assert plotting.better(metric) == expected
