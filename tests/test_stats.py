"""Cross-seed statistics: hand-checked intervals, bootstrap bands inside the data's range,
rliable aggregates, plot and logger outputs."""

import numpy as np
import pytest

from jaxcredit import stats
from jaxcredit.plotting import forward_fill, smooth


def test_mean_ci_hand_values():
    mean, half = stats.mean_ci(np.array([1.0, 2.0, 3.0]))
    # sd = 1, n = 3, t_{0.975, 2} = 4.303: half = 4.303 / √3.
    assert mean == pytest.approx(2.0) and half == pytest.approx(4.303 / np.sqrt(3), rel=1e-4)
    mean, half = stats.mean_ci(np.array([[1.0, np.nan], [3.0, 5.0]]))
    np.testing.assert_allclose(mean, [2.0, 5.0])
    assert half[1] == 0.0  # one finite value: no interval


def test_iqm_hand_values():
    assert stats.iqm(np.arange(8.0)) == pytest.approx(3.5)  # mean of 2, 3, 4, 5
    assert stats.iqm([1.0, 100.0, 2.0, 3.0]) == pytest.approx(2.5)
    assert np.isnan(stats.iqm([np.nan]))


def test_bootstrap_band_stays_inside_the_data():
    """Two seeds of CartPole at 0 and 500: a Student-t band spans −2700…+3200, the bootstrap
    interval of the mean stays within [0, 500]."""
    curves = np.array([[0.0, 10.0, 500.0], [500.0, 20.0, 500.0]])
    mean, low, high = stats.bootstrap_band(curves)
    np.testing.assert_allclose(mean, [250.0, 15.0, 500.0])
    assert np.all(low >= curves.min(0)) and np.all(high <= curves.max(0))
    _, half = stats.mean_ci(curves[:, 0])
    assert half > 2000  # the Student-t half-width it replaces
    m, lo, hi = stats.bootstrap_mean_ci(np.array([1.0, 1.0, 1.0]))
    assert m == lo == hi == 1.0


def test_aggregate_and_probability_of_improvement_follow_rliable():
    rng = np.random.default_rng(0)
    better, worse = rng.uniform(0.5, 1.0, (16, 2)), rng.uniform(0.0, 0.4, (16, 2))
    agg = stats.aggregate({"better": better, "worse": worse}, reps=200)
    assert agg["better"]["iqm_low"] <= agg["better"]["iqm"] <= agg["better"]["iqm_high"]
    assert agg["better"]["mean"] == pytest.approx(better.mean())
    assert agg["worse"]["iqm_high"] < agg["better"]["iqm_low"]
    p, low, high = stats.probability_of_improvement(better, worse, reps=200)
    assert p == pytest.approx(1.0) and low <= p <= high
    # One task given as a vector of runs.
    assert stats.aggregate({"x": np.arange(4.0)}, reps=50)["x"]["runs"] == 4


def test_aggregate_table_against_a_baseline():
    """Ties count one half in rliable's P(X > Y): identical scores give exactly 0.5."""
    from jaxcredit.experiment import aggregate_table

    base = np.array([[0.1], [0.2], [0.3], [0.4]])
    lines, agg = aggregate_table({"A2C": base, "same": base.copy(), "better": base + 1.0},
                                 baseline="A2C")
    assert agg["same"]["p_improvement"] == pytest.approx(0.5)
    assert agg["better"]["p_improvement"] == pytest.approx(1.0)
    assert "p_improvement" not in agg["A2C"]
    assert lines[0] == "| learner | IQM | mean | P(> A2C) |"
    assert lines[2].startswith("| A2C | 0.250") and lines[2].endswith("|  |")
    assert lines[4].endswith("| 1.00 [1.00, 1.00] |")


def test_oracle_gain_share_hand_values():
    # Means: fitted 0.5, oracle 0.9, baseline 0.1: (0.5 − 0.1) / (0.9 − 0.1) = 0.5.
    share, low, high = stats.oracle_gain_share([0.4, 0.6], [0.8, 1.0], [0.0, 0.2, np.nan])
    assert share == pytest.approx(0.5)
    assert low <= share <= high
    # Constant seeds: (0.3 − 0.1) / (0.7 − 0.1) = 1/3, and the interval is the point.
    assert stats.oracle_gain_share([0.3] * 3, [0.7] * 3, [0.1] * 3) == pytest.approx(
        (1 / 3, 1 / 3, 1 / 3))
    # No gain to recover: NaN.
    assert np.isnan(stats.oracle_gain_share([0.3], [0.1], [0.2])[0])


def test_forward_fill_and_smooth():
    np.testing.assert_allclose(forward_fill(np.array([np.nan, 1.0, np.nan, 3.0])),
                               [np.nan, 1.0, 1.0, 3.0])
    np.testing.assert_allclose(smooth(np.array([1.0, 2.0, 3.0, np.nan, 5.0]), 2),
                               [1.0, 1.5, 2.5, 3.0, 5.0])


def test_tensorboard_logger_writes_one_run_per_member(tmp_path):
    pytest.importorskip("tensorboardX")
    from jaxcredit import loggers

    made = loggers.make_loggers(["tensorboard"], tmp_path, [(0, 0), (0, 1)], {"env": "x"})
    loggers.log_chunk(made, {"loss": np.array([[1.0, np.nan], [2.0, 3.0]])}, first_update=0,
                      steps_per_update=10)
    for logger in made:
        logger.close()
    assert sorted(p.name for p in (tmp_path / "tensorboard").iterdir()) == ["h0-s0", "h0-s1"]
    with pytest.raises(ValueError, match="unknown logger"):
        loggers.make_loggers(["mlflow"], tmp_path, [(0, 0)], {})


def test_a_sweep_ranks_by_the_exact_return_where_there_is_one():
    names = ["episode_return", "eval/return", "eval/exact_return"]
    assert stats.ranking_metric(names) == "eval/exact_return"
    assert stats.headline_metric(names) == "eval/return"
    assert stats.ranking_metric(names[:2]) == "eval/return"
    assert stats.ranking_metric(names[:1]) == "episode_return"
    # Two settings tied on the sampled return, ordered by the exact one: best first.
    settings = [{"lr": 0.1}, {"lr": 0.2}]
    exact = {0: (None, np.array([[0.5, 0.6], [0.5, 0.62]])),
             1: (None, np.array([[0.5, 0.7], [0.5, 0.72]]))}
    lines = stats.setting_ranking(exact, settings, ("lr",), "eval/exact_return")
    assert lines[0] == "settings ranked by final eval/exact_return:"
    assert "lr=0.2" in lines[1] and "0.71" in lines[1] and "lr=0.1" in lines[2]
