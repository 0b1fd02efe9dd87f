"""COCOA's gradient analysis: bias, variance and SNR (dB) of each estimator against the exact
policy gradient, on TreeMDP against state overlap and on KeyToDoor against the track length L.

Every point is ``jaxcredit diagnose`` (``jaxcredit.diagnostics``): M episodes of one
softmax-tabular policy, each estimator's per-episode gradient, and the exact gradient ∇J by
dynamic programming. All estimators see the same policies and episodes ("matched policies").

* ``tree``: TreeMDP (depth 4, branching 6) at state overlap o = 0..6, the uniform policy (COCOA's
  tabular agent at initialisation), environment seeds 100, 101, ... (COCOA: 100–109), exact
  hindsight models (COCOA's ``_gt`` runs): REINFORCE, Advantage (exact V baseline), HCA+
  (``hca_state``, exact) and COCOA-reward (exact).
* ``key_to_door``: KeyToDoor at L ∈ {23, 43, 63, 83, 103}, random policies θ ~ N(0, 0.5²),
  learned models fitted on a separate batch (COCOA's "learned" figure) and the exact ones.

    python experiments/cocoa_gradients/run.py --size smoke      # a 2-minute check
    python experiments/cocoa_gradients/run.py --size cpu        # the committed results
    python experiments/cocoa_gradients/run.py --size cpu --out DIR --publish

Outputs go to a new folder under ``runs/experiments/`` (or ``--out``); ``--publish`` copies
``table.md``, ``results.json`` and ``gradients.png`` into ``experiments/cocoa_gradients/results/``
(``--force`` to replace them).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import time
from typing import Optional

import jax
import numpy as np
import tyro

from jaxcredit import experiment as X
from jaxcredit import stats
from jaxcredit.diagnostics import program as P

HERE = pathlib.Path(__file__).resolve().parent
METRICS = ("snr_db", "var_db", "bias_db", "floor_db")

TREE_ESTIMATORS = {
    "REINFORCE": "reinforce",
    "Advantage": "mc",
    "HCA+ (exact)": "hca_state:model=oracle",
    "COCOA-reward (exact)": "cocoa_reward:model=oracle",
}
KEY_TO_DOOR_ESTIMATORS = {
    "REINFORCE": "reinforce",
    "Advantage": "mc",
    "A2C+GAE": "gae",
    "hca_return": "hca_return",
    "HCA+": "hca_state:pairs=sampled:num_pairs=16",
    "COCOA-reward": "cocoa_reward:pairs=rewarded:num_pairs=16",
    "COCOA-feature": "cocoa_feature:pairs=rewarded:num_pairs=16",
    "HCA+ (exact)": "hca_state:model=oracle:pairs=sampled:num_pairs=16",
    "COCOA-reward (exact)": "cocoa_reward:model=oracle:pairs=rewarded:num_pairs=16",
}
SIZES = {
    "smoke": dict(overlaps=(0, 3), lengths=(8,), policies=2, episodes=256, fit=128,
                  fit_steps=20),
    "cpu": dict(overlaps=(0, 1, 2, 3, 4, 5, 6), lengths=(23, 63, 103), policies=3,
                episodes=1024, fit=256, fit_steps=200),
    "paper": dict(overlaps=(0, 1, 2, 3, 4, 5, 6), lengths=(23, 43, 63, 83, 103), policies=10,
                  episodes=4096, fit=1024, fit_steps=500),
}


@dataclasses.dataclass
class Args(X.OutputArgs):
    """Bias / variance / SNR in dB against state overlap (TreeMDP) and L (KeyToDoor)."""

    size: str = "cpu"
    """smoke | cpu | paper"""
    parts: tuple[str, ...] = ("tree", "key_to_door")
    """which analyses to run"""
    policies: Optional[int] = None
    """policies (tree: environment seeds) per point (default: the size's)"""


def diagnose_points(env: str, env_kwargs: tuple, labels: dict, num_policies: int, size: dict,
                    hindsight: str, policy_scale: float, env_seeds: Optional[list] = None
                    ) -> dict:
    """``{label: {metric: [policies]}}`` for one environment setting.

    One compiled diagnostic per environment (``make_diagnose``) runs every policy; with
    ``env_seeds`` each policy is a different environment seed instead (the uniform policy)."""
    out = {label: {m: [] for m in METRICS} for label in labels}
    settings = ([(env_kwargs + (("seed", s),), 0) for s in env_seeds] if env_seeds
                else [(env_kwargs, i) for i in range(num_policies)])
    run, mdp, last_kwargs = None, None, None
    for kwargs, seed in settings:
        if kwargs != last_kwargs:
            config = P.DiagnoseConfig(env=env, env_kwargs=kwargs,
                                      estimators=tuple(labels.values()),
                                      num_trajectories=size["episodes"], num_fit=size["fit"],
                                      fit_steps=size["fit_steps"], hindsight=hindsight,
                                      gamma=1.0)
            run, mdp = P.make_diagnose(config)
            last_kwargs = kwargs
        policy_key, run_key = jax.random.split(jax.random.key(seed))
        theta = P.random_policy(policy_key, mdp, policy_scale)
        result = jax.device_get(run(run_key, theta))
        for label, spec in labels.items():
            for m in METRICS:
                out[label][m].append(float(result[spec][m]))
    return out


def save_partial(out: pathlib.Path, results: dict) -> None:
    """The points so far, so that an interrupted run keeps what it measured."""
    (out / "partial.json").write_text(json.dumps(results, indent=1))


def cell(values) -> str:
    mean, half = stats.mean_ci(np.asarray(values, np.float64))
    return f"{float(mean):.1f} ± {float(half):.1f}"


def report(out: pathlib.Path, results: dict, meta: dict) -> list[str]:
    lines = [f"COCOA gradient analysis, size '{meta['size']}': mean ± 95% CI (Student t) over "
             f"{meta['policies']} policies (tree: environment seeds) per point; "
             f"M = {meta['episodes']} episodes per gradient estimate; dB relative to ‖∇J‖². "
             "A bias below the noise floor is sampling noise of the mean, not bias.", ""]
    for part, axis in (("tree", "overlap"), ("key_to_door", "L")):
        if part not in results:
            continue
        points = list(results[part])
        labels = list(results[part][points[0]])
        for metric, title in (("var_db", "Variance (dB)"), ("snr_db", "SNR (dB)"),
                              ("bias_db", "Bias (dB)"), ("floor_db", "Noise floor of the "
                                                                     "mean (dB)")):
            lines += [f"### {part}: {title} against {axis}", ""]
            lines += X.markdown_table(
                [f"{axis} = {p}" for p in points], labels,
                lambda row, col: cell(results[part][row.split(" = ")[1]][col][metric]), "")
            lines += [""]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    plot(out, results)
    return ["table.md", "results.json", "gradients.png"]


def plot(out: pathlib.Path, results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(part, metric) for part in ("tree", "key_to_door") if part in results
              for metric in (("var_db",) if part == "tree" else ("snr_db", "var_db", "bias_db"))]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (part, metric) in zip(axes[0], panels):
        points = list(results[part])
        x = np.array([float(p) for p in points])
        for label in results[part][points[0]]:
            values = np.array([results[part][p][label][metric] for p in points])
            ax.errorbar(x, values.mean(1), yerr=values.std(1, ddof=1) / np.sqrt(values.shape[1]),
                        marker="o", ms=3, capsize=2, ls=X.line_style(label), label=label)
        ax.set_xlabel("state overlap" if part == "tree" else "track length L")
        ax.set_ylabel(metric.replace("_db", " (dB)"))
        ax.set_title(f"{'TreeMDP' if part == 'tree' else 'KeyToDoor'}: {metric}", fontsize=9)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "gradients.png", dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    args = tyro.cli(Args, args=argv)
    if args.size not in SIZES:
        print(f"run.py: error: --size must be one of {', '.join(SIZES)}", file=sys.stderr)
        return 2
    if args.set or args.hparam:  # the shared flags of scripts whose runs are engine runs
        print("run.py: error: --set and --hparam change engine runs; this script trains none "
              "(it fits models on fixed policies)", file=sys.stderr)
        return 2
    unknown = set(args.parts) - {"tree", "key_to_door"}
    if unknown:
        print(f"run.py: error: unknown part(s) {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    size = dict(SIZES[args.size])
    policies = args.policies or size["policies"]
    if policies < 2:
        print("run.py: error: need at least 2 policies", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out) if args.out else X.default_out("cocoa_gradients")
    out.mkdir(parents=True, exist_ok=True)
    start, results, seconds = time.time(), {}, {}
    # part -> (environment, option swept, its values, estimators, policy scale, env seeds)
    plans = {
        "tree": ("TreeMDP", "state_overlap", size["overlaps"], TREE_ESTIMATORS, 0.0,
                 list(range(100, 100 + policies))),
        "key_to_door": ("KeyToDoor", "length", size["lengths"], KEY_TO_DOOR_ESTIMATORS,
                        P.DEFAULT_POLICY_SCALE, None),
    }
    for part in ("tree", "key_to_door"):
        if part not in args.parts:
            continue
        env, option, values, labels, scale, env_seeds = plans[part]
        results[part] = {}
        for value in values:
            t = time.time()
            results[part][str(value)] = diagnose_points(
                env, ((option, value),), labels, policies, size, "learned", scale,
                env_seeds=env_seeds)
            seconds[f"{part}/{option}={value}"] = time.time() - t
            save_partial(out, results)
            print(f"{part} {option} {value}: {time.time() - t:.0f} s", flush=True)
    meta = dict(size=args.size, policies=policies, episodes=size["episodes"], fit=size["fit"],
                fit_steps=size["fit_steps"], seconds=seconds, wall_seconds=time.time() - start,
                estimators={"tree": TREE_ESTIMATORS, "key_to_door": KEY_TO_DOOR_ESTIMATORS},
                command="python experiments/cocoa_gradients/run.py " + " ".join(
                    sys.argv[1:] if argv is None else argv))
    files = report(out, results, meta)
    print(f"report in {out}: {', '.join(files)}")
    return X.publish_if_asked(args, out, HERE, files)


if __name__ == "__main__":
    sys.exit(main())
