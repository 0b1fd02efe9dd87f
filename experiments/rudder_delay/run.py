"""Return decomposition against the reward delay: episodes to learn, for MC, TD(λ) and RUDDER.

The shape of RUDDER's artificial Task II (Arjona-Medina et al. 2019): the decisive action comes
first, the reward only at the episode's end, and the delay D between them grows. Here the task
is ``DelayedReward-DelayedEffect`` (``jaxcredit.envs.hca_tasks``): the first action picks a
branch worth +1 or −1, then D aliased steps whose actions change nothing pay N(0, σ²) noise each,
and the wrapper pays the whole return (±1 plus the D noises) at the last step. Every learner
sees one whole episode per environment per update (T = D + 1):

* ``REINFORCE``: the Monte-Carlo return, no critic (MC);
* ``A2C+GAE``: GAE(λ) with a learned critic on the delayed reward (TD(λ));
* ``A2C+RUDDER``: the same A2C+GAE(λ) on the rewards an LSTM return decomposition
  redistributes (``jaxcredit.redistribute.rudder``), fitted in the same compiled update;
* ``A2C+RUDDER oracle``: the same with the exact return prediction of the current policy
  (the paper's optimal redistribution), to separate the method from the fitted model.

The metric is the number of episodes until the exact expected return J(π) of the policy network
(dynamic programming on the undelayed MDP, inside the run) first reaches 90 % of the optimal
return (J ≥ 0.9; uniform policy: 0). A seed that never reaches it counts as the budget
(censored; the table says how many seeds reached it).

Second part: ``DelayedReward-CartPole-v1`` (reward 1 per step, all paid at the episode's end)
with PPO+GAE and PPO+RUDDER, against PPO+GAE on the dense CartPole-v1, at PureJaxRL's PPO budget
of 5·10⁵ steps.

    python experiments/rudder_delay/run.py --size smoke     # a 1-2 minute check
    python experiments/rudder_delay/run.py --size cpu       # the committed results
    python experiments/rudder_delay/run.py --size cpu --out DIR --publish

Outputs go to a new folder under ``runs/experiments/`` (or ``--out``, resumable); ``--publish``
copies the report into ``experiments/rudder_delay/results/`` (``--force`` to replace it).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from typing import Optional

import numpy as np

from jaxcredit import experiment as X
from jaxcredit import stats
from jaxcredit.agents import TrainConfig
from jaxcredit.presets import learner_fields

HERE = pathlib.Path(__file__).resolve().parent
METRIC = "eval/exact_return"
THRESHOLD = 0.9  # of the optimal return, 1
DELAY_LEARNERS = ("REINFORCE", "A2C+GAE", "A2C+RUDDER", "A2C+RUDDER oracle")
# Learners that run only when asked for (--learners): RUDDER in its demonstration code's regime,
# and the same with the Atari code's quality gate.
EXTRA_LEARNERS = ("A2C+RUDDER demo", "A2C+RUDDER demo gated")
CARTPOLE_LEARNERS = ("PPO+GAE dense", "PPO+GAE", "PPO+RUDDER")
NUM_ENVS = 16
QUALITY_GATE = 0.2  # the Atari code's threshold (ppo2_rudder configs), q = 1 − MSE / Var(G)

SIZES = {
    "smoke": dict(delays=(5, 20), sigma=0.5, updates=20, seeds=2, cartpole_steps=20_000),
    "cpu": dict(delays=(5, 10, 20, 40, 80), sigma=0.5, updates=400, seeds=8,
                cartpole_steps=500_000),
}
# γ = 1 (episodic), the HCA tasks' agent settings; the return model's own learning rate.
DELAY_HPARAMS = dict(lr=3e-3, gamma=1.0, lambda_=0.95, ent_coef=0.003, vf_coef=0.5,
                     max_grad_norm=1.0, redistributor_lr=1e-2)
# PureJaxRL's PPO CartPole settings (the engine's ppo defaults).
CARTPOLE_HPARAMS = dict(redistributor_lr=1e-3)


@dataclasses.dataclass
class Args(X.OutputArgs):
    """Episodes to 90 % of the optimal return against the delay; delayed CartPole (module
    docstring)."""

    size: str = "cpu"
    """smoke | cpu"""
    seeds: Optional[int] = None
    """seeds per delay run (default: the size's)"""
    delays: tuple[int, ...] = ()
    """delays D (default: the size's)"""
    updates: Optional[int] = None
    """updates (of 16 episodes) per delay run (default: the size's)"""
    cartpole: bool = True
    """also run the delayed CartPole part"""
    learners: tuple[str, ...] = ()
    """delay-part learners (default: REINFORCE, A2C+GAE, A2C+RUDDER and its oracle; also
    'A2C+RUDDER demo' and 'A2C+RUDDER demo gated')"""


def delay_fields(label: str) -> dict:
    """The learner's fields; 'gated' adds the Atari code's quality gate to the demo regime."""
    if label.endswith(" gated"):
        fields = learner_fields(label.removesuffix(" gated"))
        fields["redistribute_options"] += (("quality_threshold", QUALITY_GATE),)
        return fields
    return {"redistribute_fit_steps": 4, **learner_fields(label)}


def delay_case(delay: int, label: str, sigma: float, updates: int) -> X.Case:
    config = TrainConfig.from_flat(
        **delay_fields(label), env="DelayedReward-DelayedEffect",
        env_options=(("n", delay), ("sigma", sigma)), num_envs=NUM_ENVS, num_steps=delay + 1,
        total_timesteps=NUM_ENVS * (delay + 1) * updates, anneal_lr=False,
        eval_every=max(1, updates // 80), eval_episodes=16)
    # The demonstration code's model optimiser: Adam at 1e-2 with weight decay 1e-6.
    settings = (dict(DELAY_HPARAMS, redistributor_weight_decay=1e-6) if "demo" in label
                else DELAY_HPARAMS)
    return X.Case(name=f"delay{delay}/{label.replace('+', '_').replace(' ', '_')}", config=config,
                  settings=(settings,), labels={"part": "delay", "delay": delay,
                                                "learner": label})


def cartpole_case(label: str, steps: int) -> X.Case:
    dense = label.endswith(" dense")
    config = TrainConfig.from_flat(**learner_fields(label.removesuffix(" dense")),
                                   env="CartPole-v1" if dense else "DelayedReward-CartPole-v1",
                                   total_timesteps=steps, eval_every=None)
    return X.Case(name=f"cartpole/{label.replace('+', '_').replace(' ', '_')}", config=config,
                  settings=(CARTPOLE_HPARAMS,), labels={"part": "cartpole", "learner": label})


def episodes_to_threshold(run_dir: pathlib.Path) -> tuple[np.ndarray, np.ndarray, int]:
    """Per seed: episodes until J ≥ 0.9 (the budget where never), whether it was reached, and
    the budget in episodes."""
    steps, values = X.curves(run_dir, METRIC)
    config = json.loads((run_dir / "config.json").read_text())
    per_episode = int(config["config"]["num_steps"])  # one episode per env per update
    budget = int(config["num_updates"]) * NUM_ENVS
    episodes = steps / per_episode
    reached = values >= THRESHOLD
    first = np.where(reached.any(axis=1), episodes[np.argmax(reached, axis=1)], budget)
    return first, reached.any(axis=1), budget


def geometric_mean_ci(values: np.ndarray) -> str:
    """``"m [lo, hi]"``: geometric mean and the Student-t 95% CI of the mean log."""
    mean, half = (float(v) for v in stats.mean_ci(np.log10(values)))
    return f"{10 ** mean:,.0f} [{10 ** (mean - half):,.0f}, {10 ** (mean + half):,.0f}]"


def report(out: pathlib.Path, cases: list[X.Case], meta: dict) -> list[str]:
    lines, results = [], {"delay": {}, "cartpole": {}}
    delay_cases = [c for c in cases if c.labels["part"] == "delay"]
    files = []
    if delay_cases:
        delays = sorted({c.labels["delay"] for c in delay_cases})
        learners = list(dict.fromkeys(c.labels["learner"] for c in delay_cases))
        for c in delay_cases:
            first, reached, budget = episodes_to_threshold(out / c.name)
            steps, curve = X.curves(out / c.name, METRIC)
            entry = {"episodes": first.tolist(), "reached": reached.tolist(), "budget": budget,
                     "env_steps": steps.tolist(), "curve": curve.tolist(),
                     "final": X.final(out / c.name, METRIC, last=3).tolist()}
            for extra in ("redistribute/decisive_share", "redistribute/advantage_correlation",
                          "redistribute/prediction_error"):
                try:
                    # The prediction error is per update; the diagnostics against the exact
                    # Q-values are measured at evaluation points.
                    entry[extra] = X.final(out / c.name, extra,
                                           last=16 if extra.endswith("error") else 3).tolist()
                except ValueError:
                    pass
            results["delay"][f"{c.labels['delay']}|{c.labels['learner']}"] = entry

        def cell(key):
            def fn(delay, learner):
                entry = results["delay"].get(f"{delay}|{learner}")
                if entry is None:
                    return ""
                if key == "episodes":
                    n = sum(entry["reached"])
                    return (f"{geometric_mean_ci(np.asarray(entry['episodes']))} "
                            f"({n}/{len(entry['reached'])})")
                if key not in entry:
                    return ""
                return X.mean_ci_cell(np.asarray(entry[key]), 3)
            return fn

        lines += [f"DelayedReward-DelayedEffect, σ = {meta['sigma']}, {meta['seeds']} seeds, "
                  f"{meta['updates']} updates of {NUM_ENVS} episodes "
                  f"({meta['updates'] * NUM_ENVS} episodes) per run.", "",
                  "### Episodes until J(π) ≥ 0.9 (geometric mean [95% CI] over seeds; a seed "
                  "that never reaches it counts as the budget; seeds that reached it)", ""]
        lines += X.markdown_table([str(d) for d in delays], learners,
                                  lambda d, lab: cell("episodes")(int(d), lab)) + [""]
        lines += ["### Final J(π) (mean of the last 3 evaluations, mean ± 95% CI)", ""]
        lines += X.markdown_table([str(d) for d in delays], learners,
                                  lambda d, lab: cell("final")(int(d), lab)) + [""]
        rudder = [lab for lab in learners if "RUDDER" in lab]
        for key, title in (("redistribute/decisive_share", "Share of |r̃| on the decisive "
                            "first step (last 3 evaluations)"),
                           ("redistribute/advantage_correlation", "Correlation of r̃ with the "
                            "exact advantage of the taken action (last 3 evaluations)"),
                           ("redistribute/prediction_error", "RMS return-prediction error at "
                            "episode ends (last 16 updates)")):
            lines += [f"### {title}", ""]
            lines += X.markdown_table([str(d) for d in delays], rudder,
                                      lambda d, lab, k=key: cell(k)(int(d), lab)) + [""]
        X.plot_curve_panels(out / "curves.png", {
            f"D = {d}": {lab: (results["delay"][f"{d}|{lab}"]["env_steps"],
                               results["delay"][f"{d}|{lab}"]["curve"]) for lab in learners}
            for d in delays}, "exact J(π)")
        _plot_scaling(out / "scaling.png", delays, learners, results["delay"])
        files += ["curves.png", "scaling.png"]
    cp_cases = [c for c in cases if c.labels["part"] == "cartpole"]
    if cp_cases:
        for c in cp_cases:
            steps, curve = X.curves(out / c.name, "eval/return")
            results["cartpole"][c.labels["learner"]] = {
                "env_steps": steps.tolist(), "curve": curve.tolist(),
                "final": X.final(out / c.name, "eval/return", last=2).tolist(),
                "area": X.area(out / c.name, "eval/return").tolist(),
                "seconds": meta["seconds"].get(c.name)}
        labels = [c.labels["learner"] for c in cp_cases]
        lines += [f"### CartPole-v1, {meta['cartpole_steps']:,} env steps per seed, "
                  f"{meta['cartpole_seeds']} seeds (evaluation return, mean ± 95% CI)", "",
                  "| learner | reward | final return | mean over training | train seconds |",
                  "|---|---|---|---|---|"]
        for lab in labels:
            e = results["cartpole"][lab]
            reward = "dense" if lab.endswith("dense") else "delayed to the episode's end"
            seconds = "" if e["seconds"] is None else f"{e['seconds']:.0f}"
            lines.append(f"| {lab.removesuffix(' dense')} | {reward} | "
                         f"{X.mean_ci_cell(np.asarray(e['final']), 1)} | "
                         f"{X.mean_ci_cell(np.asarray(e['area']), 1)} | {seconds} |")
        lines.append("")
        X.plot_curve_panels(out / "cartpole.png", {"CartPole-v1": {
            lab: (results["cartpole"][lab]["env_steps"], results["cartpole"][lab]["curve"])
            for lab in labels}}, "evaluation return")
        files.append("cartpole.png")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    return ["table.md", "results.json"] + files


def _plot_scaling(path: pathlib.Path, delays, learners, results) -> None:
    import matplotlib  # noqa: PLC0415
    import matplotlib.ticker  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(5, 3.6))
    for lab in learners:
        logs = [np.log10(results[f"{d}|{lab}"]["episodes"]) for d in delays]
        mean = np.array([v.mean() for v in logs])
        sem = np.array([v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0.0 for v in logs])
        ax.errorbar(delays, 10 ** mean, yerr=[10 ** mean - 10 ** (mean - 2 * sem),
                                              10 ** (mean + 2 * sem) - 10 ** mean],
                    label=lab, marker="o", capsize=3, linestyle=X.line_style(lab))
    budget = results[f"{delays[0]}|{learners[0]}"]["budget"]
    ax.axhline(budget, color="grey", linewidth=0.8, linestyle=":", label="budget")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(list(delays), [str(d) for d in delays])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("delay D (steps)")
    ax.set_ylabel("episodes to J ≥ 0.9")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plan(args: Args, size: dict) -> tuple[list[X.Case], dict]:
    delays = args.delays or size["delays"]
    if any(d < 1 for d in delays):
        raise ValueError(f"delays must be positive, got {delays}")
    cases = [delay_case(d, lab, size["sigma"], size["updates"]) for d in delays
             for lab in (args.learners or DELAY_LEARNERS)]
    if args.cartpole:
        cases += [cartpole_case(lab, size["cartpole_steps"]) for lab in CARTPOLE_LEARNERS]
    return cases, {"updates": size["updates"], "delays": list(delays), "sigma": size["sigma"],
                   "delay_hparams": DELAY_HPARAMS, "cartpole_hparams": CARTPOLE_HPARAMS,
                   "cartpole_steps": size["cartpole_steps"], "cartpole_seeds": size["seeds"]}


def main(argv=None) -> int:
    return X.main("rudder_delay", HERE, Args, SIZES, plan, report, 1999, argv)


if __name__ == "__main__":
    sys.exit(main())
