"""Hindsight experience replay on bit flipping: success rate against the number of bits.

Andrychowicz et al. (2017), Fig. 1: DQN without HER solves bit flipping only for n ≤ 13 bits,
DQN with HER (``future``, k = 4) up to n = 50. Here both run on the off-policy engine
(``jaxcredit.agents.dqn``; HER is the relabel stage ``jaxcredit.relabel.her``), one compiled
program per (n, learner) with every seed vmapped, each a run directory. The metric is the
greedy policy's success rate ``eval/success_rate_greedy`` (the paper's test episodes), measured
inside the run on fresh episodes. A second table is the strategy ablation (the paper's Sec. 4.5)
at one hard n: ``final``, ``future``, ``episode`` and ``random``, each with k = 4. A third is
the same comparison on goal navigation (``GoalGrid``, a size × size grid), the goal task beyond
bit strings.

    python experiments/her_bitflip/run.py --size smoke       # a 1-minute check
    python experiments/her_bitflip/run.py --size cpu         # the committed results
    python experiments/her_bitflip/run.py --size cpu --out DIR --publish

Set-up (the paper's DQN bit-flipping settings where stated, docs in the README): one hidden
layer of 256 ReLU units, Adam lr 1e-3, batch 128, γ = 0.98, ε-greedy with ε = 0.2, a "cycle" of
16 episodes followed by 40 gradient steps and a Polyak target update with τ = 0.05. One engine
update is one cycle: 16 auto-resetting environments × n steps, which is 16 episodes while no
episode ends early (once the agent succeeds, episodes end sooner and more of them fit).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from typing import Optional

import numpy as np

from jaxcredit import experiment as X
from jaxcredit.agents import TrainConfig

HERE = pathlib.Path(__file__).resolve().parent
METRIC = "eval/success_rate_greedy"
STRATEGIES = ("final", "future", "episode", "random")
SIZES = {
    "smoke": dict(bits=(5, 8), updates=30, seeds=2, ablation_bits=5, buffer=20_000, grid=4,
                  grid_updates=20, long=None),
    "cpu": dict(bits=(5, 10, 15, 20, 25, 30, 40, 50), updates=1000, seeds=8, ablation_bits=20,
                buffer=100_000, grid=16, grid_updates=300, long=(50, 2000)),
    "paper": dict(bits=(5, 10, 15, 20, 25, 30, 40, 50), updates=4000, seeds=8, ablation_bits=40,
                  buffer=1_000_000, grid=32, grid_updates=2000, long=None),
}
EPISODES_PER_UPDATE = 16
GRADIENT_STEPS = 40
HPARAMS = dict(lr=1e-3, gamma=0.98, epsilon_start=0.2, epsilon_end=0.2, tau=0.05,
               max_grad_norm=10.0)


@dataclasses.dataclass
class Args(X.OutputArgs):
    """Success rate of DQN and DQN+HER against the number of bits (module docstring)."""

    size: str = "cpu"
    """smoke | cpu | paper"""
    seeds: Optional[int] = None
    """seeds per run (default: the size's)"""
    bits: tuple[int, ...] = ()
    """numbers of bits n (default: the size's)"""
    updates: Optional[int] = None
    """updates (cycles of 16 episodes) per run (default: the size's)"""
    ablation: bool = True
    """also run the strategy ablation at the size's ablation n"""


def case(n: int, learner: str, updates: int, buffer: int, strategy: str = "future",
         group: str = "bits") -> X.Case:
    relabel = dict(relabel="her", relabel_options=(("k", 4), ("strategy", strategy))) \
        if learner != "DQN" else {}
    # n is the number of bits, or for the grid group the grid's size (episodes of 2n steps).
    env, options, steps = (("GoalGrid", (("size", n),), 2 * n) if group == "grid"
                           else ("BitFlip", (("n", n),), n))
    config = TrainConfig.from_flat(
        algo="dqn", estimator="q_learning", env=env, env_options=options,
        num_envs=EPISODES_PER_UPDATE, num_steps=steps,
        total_timesteps=EPISODES_PER_UPDATE * steps * updates, buffer_size=buffer,
        batch_size=128, learning_starts=EPISODES_PER_UPDATE * steps, gradient_steps=GRADIENT_STEPS,
        target_update_every=1, hidden_sizes=(256,), activation="relu",
        eval_every=max(1, updates // 20), eval_episodes=32, **relabel)
    name = f"{group}/n{n}/{learner.replace(' ', '_').replace('+', '_').replace('=', '')}"
    return X.Case(name=name, config=config, settings=(HPARAMS,),
                  labels={"n": n, "learner": learner, "group": group})


def report(out: pathlib.Path, cases: list[X.Case], meta: dict) -> list[str]:
    results = {}
    for c in cases:
        run_dir = out / c.name
        steps, curve = X.curves(run_dir, METRIC)
        results[c.name] = {**c.labels, "env_steps": steps.tolist(), "curve": curve.tolist(),
                           "final": X.final(run_dir, METRIC, last=3).tolist(),
                           "area": X.area(run_dir, METRIC).tolist()}
    bits = [c for c in cases if c.labels["group"] == "bits"]
    ns = sorted({c.labels["n"] for c in bits})
    learners = list(dict.fromkeys(c.labels["learner"] for c in bits))
    lookup = {(r["group"], r["n"], r["learner"]): r for r in results.values()}

    def cell(group, key):
        def fn(row, learner):
            r = lookup.get((group, int(row.split("=")[1]), learner))
            return "" if r is None else X.mean_ci_cell(r[key], 2)
        return fn

    lines = [f"Bit flipping, size '{meta['size']}': {meta['seeds']} seeds per cell, "
             f"{meta['updates']} updates of {EPISODES_PER_UPDATE} environments × n steps per run "
             f"({meta['updates'] * EPISODES_PER_UPDATE:,} · n env steps, "
             f"{meta['updates'] * GRADIENT_STEPS:,} gradient steps); mean ± 95% CI (Student t) "
             "over seeds of the greedy policy's success rate on 32 fresh episodes.", ""]
    rows = [f"n={n}" for n in ns]
    lines += ["### Final success rate (mean of the last 3 evaluations)", ""]
    lines += X.markdown_table(rows, learners, cell("bits", "final"), corner="bits") + [""]
    lines += ["### Mean success rate over training (area under the curve)", ""]
    lines += X.markdown_table(rows, learners, cell("bits", "area"), corner="bits") + [""]
    ablation = [c for c in cases if c.labels["group"] == "ablation"]
    shared = [c for c in bits if ablation and c.labels["learner"] == "DQN+HER"
              and c.labels["n"] == ablation[0].labels["n"]]
    if shared:  # the ablation's `future` row is the main comparison's run
        name = shared[0].name
        results[name + "#ablation"] = dict(results[name], group="ablation",
                                           learner="HER future")
        lookup[("ablation", shared[0].labels["n"], "HER future")] = results[name + "#ablation"]
        ablation = sorted(ablation + [X.Case(name + "#ablation", shared[0].config, (),
                                             {"n": shared[0].labels["n"],
                                              "learner": "HER future", "group": "ablation"})],
                          key=lambda c: STRATEGIES.index(c.labels["learner"].split()[1]))
    grid = [c for c in cases if c.labels["group"] == "grid"]
    if grid:
        size = grid[0].labels["n"]
        learners_grid = [c.labels["learner"] for c in grid]
        lines += [f"### GoalGrid {size} × {size} ({meta['grid_updates']} updates of "
                  f"{EPISODES_PER_UPDATE} environments × {2 * size} steps)", ""]
        for key in ("final", "area"):
            lines += X.markdown_table([f"size={size}"], learners_grid, cell("grid", key),
                                      corner=key) + [""]
    for c in (c for c in cases if c.labels["group"] == "long"):
        r = results[c.name]
        lines += [f"### n = {c.labels['n']} with DQN+HER over {c.config.num_updates:,} updates "
                  f"(twice the budget)", "",
                  f"final {X.mean_ci_cell(r['final'], 2)}, area {X.mean_ci_cell(r['area'], 2)}",
                  ""]
    if ablation:
        n = ablation[0].labels["n"]
        strategies = [c.labels["learner"] for c in ablation]
        lines += [f"### Strategy ablation at n = {n} (k = 4 each)", ""]
        lines += X.markdown_table([f"n={n}"], strategies, cell("ablation", "final"),
                                  corner="final") + [""]
        lines += X.markdown_table([f"n={n}"], strategies, cell("ablation", "area"),
                                  corner="area") + [""]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    plot(out / "success_rate.png", ns, learners, lookup, ablation, results)
    return ["table.md", "results.json", "success_rate.png"]


def plot(path: pathlib.Path, ns, learners, lookup, ablation, results) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    from jaxcredit.stats import bootstrap_band  # noqa: PLC0415

    panels = 2 if ablation else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 3.6), squeeze=False)
    ax = axes[0, 0]
    for learner in learners:
        finals = np.array([lookup[("bits", n, learner)]["final"] for n in ns])  # [n, seeds]
        mean, low, high = bootstrap_band(finals.T)
        line, = ax.plot(ns, mean, marker="o", label=learner)
        ax.fill_between(ns, low, high, color=line.get_color(), alpha=0.2, lw=0)
    ax.set_xlabel("number of bits n")
    ax.set_ylabel("final success rate (greedy)")
    ax.set_ylim(-0.03, 1.03)
    ax.legend(fontsize=8)
    ax.set_title("DQN vs DQN+HER (future, k = 4)", fontsize=9)
    if ablation:
        ax = axes[0, 1]
        for c in ablation:
            r = results[c.name]
            mean, low, high = bootstrap_band(np.asarray(r["curve"]))
            line, = ax.plot(r["env_steps"], mean, label=r["learner"])
            ax.fill_between(r["env_steps"], low, high, color=line.get_color(), alpha=0.15,
                            lw=0)
        ax.set_xlabel("env steps per seed")
        ax.set_ylabel("success rate (greedy)")
        ax.set_ylim(-0.03, 1.03)
        ax.legend(fontsize=8)
        ax.set_title(f"HER strategies at n = {ablation[0].labels['n']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plan(args: Args, size: dict) -> tuple[list[X.Case], dict]:
    updates = size["updates"]
    bits = args.bits or size["bits"]
    if any(n < 1 for n in bits):
        raise ValueError(f"--bits must be positive, got {bits}")
    cases = [case(n, learner, updates, size["buffer"]) for n in bits
             for learner in ("DQN", "DQN+HER")]
    if args.ablation:
        n = size["ablation_bits"]
        # `future` at that n is the main comparison's DQN+HER run when there is one.
        cases += [case(n, f"HER {s}", updates, size["buffer"], s, "ablation")
                  for s in STRATEGIES if s != "future" or n not in bits]
    cases += [case(size["grid"], learner, size["grid_updates"], size["buffer"],
                   group="grid") for learner in ("DQN", "DQN+HER")]
    if size["long"] and not args.bits and not args.updates:
        # The largest n once more with twice the budget: is it solved given more cycles?
        cases.append(case(size["long"][0], "DQN+HER", size["long"][1], size["buffer"],
                          group="long"))
    return cases, {"updates": updates, "bits": list(bits), "grid": size["grid"],
                   "grid_updates": size["grid_updates"], "hparams": HPARAMS,
                   "buffer_size": size["buffer"]}


def main(argv=None) -> int:
    return X.main("her_bitflip", HERE, Args, SIZES, plan, report, 2017, argv, num_chunks=2)


if __name__ == "__main__":
    sys.exit(main())
