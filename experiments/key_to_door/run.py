"""KeyToDoor: the exact treasure-collection rate against the track length L, learned on the engine.

COCOA's linear key-to-door (Meulemans et al. 2023; ``jaxcredit.envs.KeyToDoor``): the key must be
picked at t = 0 and the door opened at t = L − 2; the cells between pay stochastic apples
(distractors). A uniformly random policy collects the treasure with probability 1/16.

Every (L, learner) pair is one engine run (``jaxcredit.experiment.Case``): all seeds vmapped in
one compiled program, written as a run directory that ``jaxcredit plot`` reads. The metric is the
environment's task metric ``eval/treasure_rate``: the exact treasure probability of the policy
network, π(KEY | s₀) · π(OPEN | door, key), computed inside the run at every evaluation (no
sampling noise). Learners (``jaxcredit.presets``) include the oracle ablation (the hindsight
model replaced by the exact one of the current policy) and the 1-step fit (the model trained as
before it had its own optimiser).

    python experiments/key_to_door/run.py --size smoke          # a 1-minute check
    python experiments/key_to_door/run.py --size cpu            # the committed results (hours)
    python experiments/key_to_door/run.py --size cpu --lengths 23 --learners A2C+GAE hca_return
    python experiments/key_to_door/run.py --size cpu --out DIR --publish   # update results/

Outputs go to a new folder under ``runs/experiments/`` (or ``--out``; an interrupted experiment
resumes there); ``--publish`` copies the report into ``experiments/key_to_door/results/``
(``--force`` to replace what is there).
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
NUM_ENVS = 8  # episodes per update, as COCOA's batch
CHANCE = 1 / 16
ALL_LEARNERS = ("REINFORCE", "A2C+GAE", "hca_return", "hca_return oracle", "hca_return 1-step",
                "hca_state", "hca_state oracle", "c2a2c", "c2a2c oracle", "cocoa_reward",
                "cocoa_reward oracle", "cocoa_feature")
# COCOA's comparison: REINFORCE, Advantage (A2C), HCA+ (hca_state), COCOA-reward, COCOA-feature;
# with hca_return and COCOA-reward's oracle ablation.
COCOA_LEARNERS = ("REINFORCE", "A2C+GAE", "hca_return", "hca_state", "cocoa_reward",
                  "cocoa_reward oracle", "cocoa_feature")
SIZES = {
    "smoke": dict(updates=8, lengths=(8,), learners=("A2C+GAE", "hca_return",
                                                     "hca_return oracle", "cocoa_reward"),
                  seeds=2),
    "cpu": dict(updates=1024, lengths=(23, 63, 103), learners=COCOA_LEARNERS, seeds=8),
    # The HCA / C2A2C study (before COCOA's estimators): results/hca_study.md.
    "cpu-hca": dict(updates=1024, lengths=(23, 63, 103), learners=ALL_LEARNERS[:9], seeds=16),
    # COCOA's budget: 10 000 updates × 8 episodes (configs/canonical_conveyorlength_performance).
    "paper": dict(updates=10_000, lengths=(23, 43, 63, 83, 103), learners=COCOA_LEARNERS,
                  seeds=8),
    # COCOA's budget and training regime (--regime cocoa is implied), L = 103 and the lengths
    # of the done-means: the learners COCOA compares, with the exact-model ablation.
    "cocoa": dict(updates=10_000, lengths=(23, 63, 103), learners=(
        "REINFORCE", "A2C+GAE", "cocoa_reward", "cocoa_reward oracle", "hca_state",
        "hca_return", "cocoa_feature"), seeds=8, regime="cocoa"),
    "cocoa-smoke": dict(updates=8, lengths=(8,), learners=(
        "REINFORCE", "A2C+GAE", "cocoa_reward", "cocoa_reward oracle"), seeds=2,
        regime="cocoa"),
}
REGIMES = ("jaxcredit", "cocoa")
INF = float("inf")
# COCOA's own training regime (seijin-kobayashi/cocoa at 55a1901,
# configs/canonical_conveyorlength_performance.py; each value's line is in the README's settings
# table). Shared by every learner: a ReLU MLP (64, 64) policy acting with the ε = 0.05 mixture,
# optax.adamw (weight decay 1e-4, ε 1e-8) without gradient clipping, no learning-rate decay,
# γ = 1, 8 episodes per update, an evaluation every 100 updates.
COCOA_CONFIG = dict(activation="relu", policy_epsilon=0.05, adam_eps=1e-8, anneal_lr=False)
COCOA_HPARAMS = dict(weight_decay=1e-4, max_grad_norm=INF, gamma=1.0)
COCOA_MODEL_CONFIG = dict(estimator_fit_steps=1)  # one hindsight step per update
COCOA_MODEL_HPARAMS = dict(estimator_lr=3e-3, estimator_weight_decay=1e-4,
                           estimator_max_grad_norm=INF)
# Per learner: (config fields, estimator options, hparams).
COCOA_LEARNER_SETTINGS = {
    # reinforce: lr_agent 3e-4, the return-to-go without a baseline.
    "REINFORCE": ({}, {}, dict(lr=3e-4)),
    # advantage: lr_agent 1e-3, a Monte-Carlo critic (TD(λ = 1)) at 1e-3: A = G − V.
    "A2C+GAE": ({}, {}, dict(lr=1e-3, lambda_=1.0)),
    # causal_reward: lr_agent 3e-4, the hypernet at 3e-3, no critic.
    "cocoa_reward": (dict(critic=False, **COCOA_MODEL_CONFIG),
                     dict(model="hypernet", hidden=256), dict(lr=3e-4, **COCOA_MODEL_HPARAMS)),
    # As "cocoa_reward floor warm-up", the agent's gradient clipped at norm 0.05 (the exact
    # model's largest in its first 1 000 updates; COCOA clips none): the fitted credit's rare
    # outsized gradients cut down ("The agent's Adam remembers").
    "cocoa_reward floor warm-up clip": (
        dict(critic=False, model_warmup_updates=100, **COCOA_MODEL_CONFIG),
        dict(model="hypernet", hidden=256, gate_floor=0.01),
        dict(lr=3e-4, **dict(COCOA_MODEL_HPARAMS, estimator_lr=1e-2), max_grad_norm=0.05)),
    # COCOA's learner, its model and rate unchanged, with the agent held still for the model's
    # first 100 updates (not COCOA's: "The agent's Adam remembers").
    "cocoa_reward warm-up": (dict(critic=False, model_warmup_updates=100, **COCOA_MODEL_CONFIG),
                             dict(model="hypernet", hidden=256),
                             dict(lr=3e-4, **COCOA_MODEL_HPARAMS)),
    # Not COCOA's: its network with leaky two-sided outputs (slope 0.01, so no entry can die)
    # and the model at 1e-2, the rate that removes the fitted coefficients' lag (README,
    # "Which coefficient fails").
    "cocoa_reward leaky": (dict(critic=False, **COCOA_MODEL_CONFIG),
                           dict(model="hypernet", hidden=256, gate_leak=0.01),
                           dict(lr=3e-4, **dict(COCOA_MODEL_HPARAMS, estimator_lr=1e-2))),
    # Not COCOA's: its network's values with a gradient floor of 0.01 where an output is 0
    # (straight through: exact zeros kept, dead entries still learn), the model at 1e-2.
    "cocoa_reward floor": (dict(critic=False, **COCOA_MODEL_CONFIG),
                           dict(model="hypernet", hidden=256, gate_floor=0.01),
                           dict(lr=3e-4, **dict(COCOA_MODEL_HPARAMS, estimator_lr=1e-2))),
    # As "cocoa_reward floor", the credit assigned with the model before this update's fit
    # (held out), where COCOA fits and then assigns on the same 8 episodes.
    "cocoa_reward floor held-out": (
        dict(critic=False, estimator_assign_before_fit=True, **COCOA_MODEL_CONFIG),
        dict(model="hypernet", hidden=256, gate_floor=0.01),
        dict(lr=3e-4, **dict(COCOA_MODEL_HPARAMS, estimator_lr=1e-2))),
    # As "cocoa_reward floor", the output layers started at zero: h = π (w = 1) before any fit.
    "cocoa_reward floor at-policy": (
        dict(critic=False, **COCOA_MODEL_CONFIG),
        dict(model="hypernet", hidden=256, gate_floor=0.01, start_at_policy=True),
        dict(lr=3e-4, **dict(COCOA_MODEL_HPARAMS, estimator_lr=1e-2))),
    # As "cocoa_reward floor", the agent held still for the model's first 100 updates (1 % of
    # the budget), so its Adam never sees the unfitted model's outsized gradients.
    "cocoa_reward floor warm-up": (
        dict(critic=False, model_warmup_updates=100, **COCOA_MODEL_CONFIG),
        dict(model="hypernet", hidden=256, gate_floor=0.01),
        dict(lr=3e-4, **dict(COCOA_MODEL_HPARAMS, estimator_lr=1e-2))),
    # causal_reward_gt: the exact coefficients, no critic; COCOA tunes its agent separately
    # (lr 1e-2); the same agent as the fitted learner (3e-4) is the ablation (--lr 1e-2 for
    # COCOA's).
    "cocoa_reward oracle": (dict(critic=False), {}, dict(lr=3e-4)),
    # causal_state (HCA+): lr_agent 3e-4, the hypernet on u = s_k at 3e-3, no critic, no
    # zero-reward mask.
    "hca_state": (dict(critic=False, **COCOA_MODEL_CONFIG), dict(model="hypernet", hidden=256),
                  dict(lr=3e-4, **COCOA_MODEL_HPARAMS)),
    # As "hca_state", with every later step at any L (COCOA's full sums; the one above samples
    # 16 per step beyond L = 32).
    "hca_state all-pairs": (dict(critic=False, **COCOA_MODEL_CONFIG),
                            dict(model="hypernet", hidden=256, pairs="all"),
                            dict(lr=3e-4, **COCOA_MODEL_HPARAMS)),
    # Return HCA is not in COCOA's code: the same agent and model optimisers as HCA+.
    "hca_return": (dict(critic=False, **COCOA_MODEL_CONFIG), {},
                   dict(lr=3e-4, **COCOA_MODEL_HPARAMS)),
    # Its exact return hindsight (γ = 1), the same agent: the oracle ablation of "hca_return".
    "hca_return oracle": (dict(critic=False), {}, dict(lr=3e-4)),
    # causal_reward_feature: as causal_reward, after 30 burn-in updates (experiment.py
    # 179-180) the features pretrained once for 20 000 steps at 3e-3 without weight decay
    # (config 139-163, run.py 138-140) on the burn-in episodes, then frozen.
    "cocoa_feature": (dict(critic=False, burn_in_updates=30, estimator_pretrain_steps=20_000,
                           **COCOA_MODEL_CONFIG),
                      dict(model="hypernet", hidden=256, features="pretrain"),
                      dict(lr=3e-4, **COCOA_MODEL_HPARAMS)),
}
COCOA_EVAL_EVERY = 100
METRICS = ("eval/treasure_rate", "eval/key_rate", "eval/exact_return")


@dataclasses.dataclass
class Args(X.OutputArgs):
    """KeyToDoor treasure rate against L for each learner (module docstring)."""

    size: str = "cpu"
    """smoke | cpu | cpu-hca | paper | cocoa (COCOA's budget and regime) | cocoa-smoke"""
    seeds: Optional[int] = None
    """seeds per run (default: the size's)"""
    lengths: tuple[int, ...] = ()
    """track lengths L (default: the size's)"""
    learners: tuple[str, ...] = ()
    """learner presets (default: the size's): """ + ", ".join(ALL_LEARNERS)
    updates: Optional[int] = None
    """updates per run (default: the size's); each update is 8 whole episodes"""
    regime: Optional[str] = None
    """jaxcredit (the earlier results' settings) | cocoa (COCOA's own settings per learner;
    default for the cocoa sizes)"""
    lr: Optional[float] = None
    """the agent's learning rate (default 3e-3; COCOA: 3e-4 over 10x the updates)"""
    estimator_lr: Optional[float] = None
    """the credit models' learning rate (default 1e-3)"""
    eval_every: Optional[int] = None
    """updates between evaluations (default: COCOA's 100 in its regime, 1/16 of the run else)"""


def entropy_coef(length: int) -> float:
    """COCOA's entropy weight 0.03·(20/(L−3))^0.6826: 0.03 at L = 23, ≈0.01 at L = 103."""
    return 0.03 * (20.0 / (length - 3)) ** 0.68260619448


def hparams_for(length: int, label: str, lr: Optional[float] = None,
                estimator_lr: Optional[float] = None) -> dict:
    """γ = 1 (episodic, as COCOA); lr 3e-3 (COCOA: 3e-4 to 1e-3 over 10× the updates)."""
    hp = dict(lr=lr or 3e-3, gamma=1.0, lambda_=0.95, vf_coef=0.5, max_grad_norm=1.0,
              ent_coef=entropy_coef(length), estimator_lr=estimator_lr or 1e-3)
    if label.endswith("1-step"):
        hp["estimator_lr"] = hp["lr"]  # as when the model shared the agent's optimiser step
    return hp


def cocoa_case(length: int, label: str, updates: int, lr: Optional[float] = None,
               estimator_lr: Optional[float] = None,
               eval_every: Optional[int] = None) -> X.Case:
    """One run in COCOA's regime (``COCOA_LEARNER_SETTINGS``)."""
    if label not in COCOA_LEARNER_SETTINGS:
        raise ValueError(f"learner {label!r} has no COCOA settings; choose from "
                         f"{', '.join(COCOA_LEARNER_SETTINGS)}")
    fields, options, hp = COCOA_LEARNER_SETTINGS[label]
    options = dict(options)
    if label.startswith("hca_state") and length > 32 and "pairs" not in options:
        options.update(pairs="sampled", num_pairs=16)  # O(L²) pairs are too many on a CPU
    overrides = dict(COCOA_CONFIG, **fields)
    if options:
        overrides["estimator_options"] = tuple(sorted(options.items()))
    config = TrainConfig.from_flat(
        **learner_fields(label, **overrides), env="KeyToDoor", env_options=(("length", length),),
        num_envs=NUM_ENVS, num_steps=length, total_timesteps=NUM_ENVS * length * updates,
        hidden_sizes=(64, 64), eval_every=min(eval_every or COCOA_EVAL_EVERY, updates),
        eval_episodes=16)
    hparams = dict(COCOA_HPARAMS, ent_coef=entropy_coef(length), **hp)
    hparams.update({k: v for k, v in (("lr", lr), ("estimator_lr", estimator_lr)) if v})
    suffix = "".join(f"_{name}{value:g}" for name, value in (
        ("lr", lr), ("elr", estimator_lr), ("eval", eval_every)) if value)
    return X.Case(name=f"cocoa/L{length}/{label.replace(' ', '_')}{suffix}", config=config,
                  settings=(hparams,), labels={"L": length, "learner": label})


def case(length: int, label: str, updates: int, lr: Optional[float] = None,
         estimator_lr: Optional[float] = None, regime: str = "jaxcredit",
         eval_every: Optional[int] = None) -> X.Case:
    if regime == "cocoa":
        return cocoa_case(length, label, updates, lr, estimator_lr, eval_every)
    overrides = {}
    preset_options = dict(learner_fields(label).get("estimator_options", ()))
    if label.startswith("hca_state") and length > 32 and "pairs" not in preset_options:
        # O(L²) pairs per episode are too many on a CPU: 16 sampled future steps per step
        # (a learner that names its pairs, "hca_state all-pairs", keeps them).
        overrides["estimator_options"] = (("pairs", "sampled"), ("num_pairs", 16))
    if label.startswith("cocoa"):
        # Only rewarded later steps carry COCOA credit: all of them up to 16 per step (every
        # step at L = 23), else 16 drawn (unbiased). COCOA fits on rewarded pairs only.
        overrides["estimator_options"] = (("pairs", "rewarded"), ("num_pairs", 16))
    config = TrainConfig.from_flat(
        **learner_fields(label, **overrides), env="KeyToDoor", env_options=(("length", length),),
        num_envs=NUM_ENVS, num_steps=length, total_timesteps=NUM_ENVS * length * updates,
        hidden_sizes=(64, 64), anneal_lr=False, eval_every=eval_every or max(1, updates // 16),
        eval_episodes=64)
    # Non-default learning rates are part of the run's name: they never share a directory.
    suffix = "".join(f"_{name}{value:g}" for name, value in (
        ("lr", lr), ("elr", estimator_lr), ("eval", eval_every)) if value)
    return X.Case(name=f"L{length}/{label.replace(' ', '_')}{suffix}", config=config,
                  settings=(hparams_for(length, label, lr, estimator_lr),),
                  labels={"L": length, "learner": label})


def report(out: pathlib.Path, cases: list[X.Case], meta: dict) -> list[str]:
    """Writes table.md, results.json and the figures into ``out``; returns the file names."""
    lengths = sorted({c.labels["L"] for c in cases})
    learners = list(dict.fromkeys(c.labels["learner"] for c in cases))
    by = {(c.labels["L"], c.labels["learner"]): out / c.name for c in cases}
    results = {}
    for (length, label), run_dir in by.items():
        steps, rate = X.curves(run_dir, "eval/treasure_rate")
        entry = {"env_steps": steps.tolist(), "treasure_rate": rate.tolist()}
        for metric in METRICS:
            entry[metric + "/final"] = X.final(run_dir, metric).tolist()
            entry[metric + "/area"] = X.area(run_dir, metric).tolist()
        entry.update(X.credit_error_entries(run_dir, last=4))
        results[f"L{length}/{label}"] = entry

    def cell(key, digits=3):
        def fn(row, col):
            entry = results.get(f"L{row.split()[-1]}/{col}")
            return "" if entry is None or key not in entry else X.mean_ci_cell(entry[key], digits)
        return fn

    rows = [f"L = {length}" for length in lengths]
    lines = [f"KeyToDoor, size '{meta['size']}': {meta['seeds']} seeds per cell, "
             f"{meta['updates']} updates × {NUM_ENVS} episodes per seed "
             f"({meta['updates'] * NUM_ENVS / 80_000:.1%} of COCOA's 80 000 episodes). "
             "Mean ± 95% CI (Student t) over seeds; chance = 1/16 = 0.0625. Rates are exact "
             "for the policy network (tabular evaluation inside the run).", ""]
    for key, title in (("eval/treasure_rate/final", "Final treasure-collection rate (exact)"),
                       ("eval/treasure_rate/area", "Mean treasure rate over training (area)"),
                       ("eval/key_rate/final", "Final π(pick key | s₀)"),
                       ("eval/exact_return/final", "Final expected return J(π) (exact)")):
        lines += [f"### {title}", ""] + X.markdown_table(rows, learners, cell(key), "") + [""]
    lines += X.credit_error_tables(rows, learners,
                                   lambda row, label: results.get(f"L{row.split()[-1]}/{label}"))
    for what in ("final", "area"):
        lines += X.gain_share_table(
            rows, learners, lambda row, label, what=what: results[
                f"L{row.split()[-1]}/{label}"][f"eval/treasure_rate/{what}"],
            f"treasure rate, {what}")

    scores = {label: np.stack([results[f"L{L}/{label}"]["eval/treasure_rate/final"]
                               for L in lengths], axis=1) for label in learners}
    table, agg = X.aggregate_table(
        scores, baseline="A2C+GAE" if "A2C+GAE" in learners else None)
    lines += ["### Across lengths: the final rate's IQM and mean (rliable, stratified bootstrap "
              "95% CI), and the probability that a run beats A2C+GAE at the same L", ""] + table
    # COCOA's regime publishes beside the jaxcredit regime's results, not over them.
    prefix = "cocoa_" if meta.get("regime") == "cocoa" else ""
    (out / f"{prefix}table.md").write_text("\n".join(lines) + "\n")
    (out / f"{prefix}results.json").write_text(json.dumps({"meta": meta, "results": results,
                                                  "aggregate": agg}, indent=1))
    plot(out, results, lengths, learners, f"{prefix}treasure_rate.png")
    return [f"{prefix}table.md", f"{prefix}results.json", f"{prefix}treasure_rate.png"]


def plot(out: pathlib.Path, results: dict, lengths, learners,
         name: str = "treasure_rate.png") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(lengths) + 1, figsize=(4 * (len(lengths) + 1), 3.6),
                             squeeze=False)
    axes = axes[0]
    for i, label in enumerate(learners):
        means, lows, highs = [], [], []
        for length in lengths:
            m, lo, hi = stats.bootstrap_mean_ci(results[f"L{length}/{label}"]
                                                ["eval/treasure_rate/final"])
            means.append(m), lows.append(m - lo), highs.append(hi - m)
        style = X.line_style(label)
        axes[0].errorbar(np.array(lengths) + (i - len(learners) / 2) * 0.6, means,
                         yerr=[lows, highs], ls=style, marker="o", ms=3, capsize=2, label=label)
    axes[0].axhline(CHANCE, color="grey", lw=0.8, ls="--")
    axes[0].set_xlabel("track length L")
    axes[0].set_ylabel("final treasure rate (exact)")
    axes[0].set_xticks(lengths)
    axes[0].legend(fontsize=6)
    for ax, length in zip(axes[1:], lengths):
        for label in learners:
            entry = results[f"L{length}/{label}"]
            mean, low, high = stats.bootstrap_band(np.asarray(entry["treasure_rate"]))
            line, = ax.plot(entry["env_steps"], mean, ls=X.line_style(label), label=label)
            ax.fill_between(entry["env_steps"], low, high, color=line.get_color(), alpha=0.15)
        ax.axhline(CHANCE, color="grey", lw=0.8, ls="--")
        ax.set_title(f"L = {length}", fontsize=9)
        ax.set_xlabel("env steps per seed")
    fig.suptitle("KeyToDoor: exact treasure rate, mean and 95% bootstrap CI over seeds",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)


def plan(args: Args, size: dict) -> tuple[list[X.Case], dict]:
    lengths = args.lengths or size["lengths"]
    learners = args.learners or size["learners"]
    if min(lengths) < 4:
        raise ValueError("need lengths >= 4")
    regime = args.regime or size.get("regime", "jaxcredit")
    if regime not in REGIMES:
        raise ValueError(f"--regime must be one of {', '.join(REGIMES)}")
    cases = [case(L, label, size["updates"], args.lr, args.estimator_lr, regime,
                  args.eval_every) for L in lengths for label in learners]
    return cases, {"regime": regime, "updates": size["updates"], "lengths": list(lengths),
                   "learners": list(learners), "num_envs": NUM_ENVS,
                   "hparams": {c.name: c.settings[0] for c in cases}}


def main(argv=None) -> int:
    return X.main("key_to_door", HERE, Args, SIZES, plan, report, 2023, argv)


if __name__ == "__main__":
    sys.exit(main())
