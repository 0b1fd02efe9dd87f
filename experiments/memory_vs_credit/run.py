"""Memory and credit, separately: the T-Maze over memory lengths and over credit lengths.

Ni et al. (NeurIPS 2023, arXiv 2307.03864, "When Do Transformers Shine in RL? Decoupling Memory
from Credit Assignment") vary the two lengths apart: in the *passive* T-Maze the cue is shown at
the start and only the final turn earns reward (memory length L, credit length 1); in the
*active* T-Maze the agent must first step back to see the cue, a step whose worth shows only at
the end (memory and credit length both about L). Their finding: a recurrent or Transformer
policy extends the memory an agent handles far (passive T-Maze solved at 1,500 steps), not the
credit (active T-Maze). Here the learner is PPO+GAE on the engine with a memoryless MLP, a GRU
and an LSTM policy (``--policy``), and the metric the greedy policy's success rate (the final
turn onto the cue's arm, ``eval/success_rate_greedy``); a memoryless policy turns right half of
the time.

    python experiments/memory_vs_credit/run.py --size smoke    # a 1-minute check
    python experiments/memory_vs_credit/run.py --size done     # passive L=20, MLP vs GRU, 1e6 steps
    python experiments/memory_vs_credit/run.py --size done-ent # the same, entropy bonus 0.05
    python experiments/memory_vs_credit/run.py --size cpu      # the length grid
    python experiments/memory_vs_credit/run.py --size cpu --out DIR --publish
    python experiments/memory_vs_credit/run.py --size ktd-cpu  # three-phase key-to-door, GRU
    python experiments/memory_vs_credit/run.py --size tvt-cpu  # TVT's key-to-door, RMA agent

The second part (``ktd-*`` sizes) is the three-phase key-to-door (``MemoryKeyToDoor``, the CCA
preset: 15 / 30 / 15 steps, apples worth 1 or 10 per episode, the door 1) with a GRU policy for
every learner: PPO+GAE at γ = 1 and at a short γ = 0.9, PPO with RUDDER's redistribution, and
A2C with ``hca_return`` (beside A2C+GAE). The credit models read observations, not the agent's
memory, and the task has no ground truth (no oracles). Metric: the greedy policy's door rate
(``eval/success_rate_greedy``: the door opened).

The third part (``tvt-*`` sizes) is Temporal Value Transport (Hung et al. 2019; the ``tvt``
redistribute stage, docs/tvt.md) on TVT's own key-to-door (the ``tvt`` preset: 15 / 90 / 15
steps, apples worth 1 or 10 per episode, the door 10), every learner with the memory agent
(``--policy rma``) and the reference's A2C settings (``TVT_HPARAMS``): A2C+TVT at γ = 0.92,
and the controls without TVT at γ = 0.92 and at γ = 1 (the reference README's "best control
RMA agent"). Metric: the door rate, whose 10 is the reference's "last phase reward".

Outputs go to a new folder under ``runs/experiments/`` (or ``--out``, resumable); ``--publish``
copies the report into ``experiments/memory_vs_credit/results/``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from typing import Optional


from jaxcredit import experiment as X
from jaxcredit.agents import EvalConfig, TrainConfig
from jaxcredit.presets import learner_fields

HERE = pathlib.Path(__file__).resolve().parent
METRIC = "eval/success_rate_greedy"
POLICIES = ("mlp", "gru", "lstm")

# Sizes. "done" is the acceptance run: engine defaults (PPO, 4 envs × 128 steps, a 64-64
# network, PureJaxRL's hyper-parameters: entropy bonus 0.01), 10^6 steps. At that bonus the
# policy's entropy collapses onto "right" within ~250 updates on some seeds before the agent
# first reaches the junction (README, "Why the defaults fail half the seeds"); "done-ent" is the
# same run with the bonus at 0.05, the setting of the grid. "cpu" is the grid, at 16 envs × 64
# steps per update and a budget that fits a 2-core machine.
ENTROPY = {"ent_coef": 0.05}
# The memory agent with the reference's Adam ε (tvt/main.py: 1e-6).
RMA = {"policy": "rma", "adam_eps": 1e-6}
# The key-to-door learners: (preset learner, hyper-parameters on top of the size's, and config
# fields on top of the preset's).
KTD_LEARNERS = {"PPO+GAE γ=1": ("PPO+GAE", {"gamma": 1.0}),
                "PPO+GAE γ=0.9": ("PPO+GAE", {"gamma": 0.9}),
                "PPO+RUDDER": ("PPO+RUDDER", {"gamma": 1.0}),
                # RUDDER's LSTM on the agent's GRU state instead of the observation.
                "PPO+RUDDER (agent state)": (
                    "PPO+RUDDER", {"gamma": 1.0},
                    {"redistribute_options": (("inputs", "agent_state"),)}),
                "A2C+GAE γ=1": ("A2C+GAE", {"gamma": 1.0}),
                "A2C+hca_return": ("hca_return", {"gamma": 1.0}),
                # h(a | x, Z) on the agent's own GRU state, which knows whether the key was
                # taken (the observation does not show it).
                "A2C+hca_return (agent state)": (
                    "hca_return", {"gamma": 1.0},
                    {"estimator_options": (("state_input", "agent_state"),)}),
                # CCA-PG, X_t a forward GRU over the window (docs/cca.md): the cca preset is
                # the high-variance task its paper reports (apples worth 1 or 10 an episode).
                "A2C+CCA": ("cca gru", {"gamma": 1.0}),
                # The memory agent (jaxcredit.rma) with and without Temporal Value Transport.
                "A2C+TVT (RMA)": ("A2C+GAE", {}, {**RMA, "redistribute": "tvt"}),
                "A2C (RMA) γ=0.92": ("A2C+GAE", {}, RMA),
                "A2C (RMA) γ=1": ("A2C+GAE", {"gamma": 1.0}, RMA)}
# The reference's batched A2C (deepmind-research tvt/main.py flags and rma.py Agent): γ 0.92,
# λ = γ (trfl's sequence A2C loss with lambda_=gamma), entropy 0.05, baseline cost 0.4, Adam at
# 2e-4 with ε 1e-6 (its β1 = 0, β2 = 0.95 are not settable here: Adam's defaults), and no
# global gradient clip (only the logits' gradient is clipped at 10 there).
TVT_HPARAMS = {"gamma": 0.92, "lambda_": 0.92, "ent_coef": 0.05, "vf_coef": 0.4, "lr": 2e-4,
               "max_grad_norm": 1e9}
SIZES = {
    "smoke": dict(timesteps=16 * 64 * 10, seeds=2, passive=(3,), active=(), policies=("mlp", "gru"),
                  num_envs=16, num_steps=64, hparams=ENTROPY),
    "done": dict(timesteps=1_000_000, seeds=4, passive=(20,), active=(), policies=("mlp", "gru"),
                 num_envs=4, num_steps=128, hparams={}),
    "done-ent": dict(timesteps=1_000_000, seeds=4, passive=(20,), active=(),
                     policies=("mlp", "gru"), num_envs=4, num_steps=128, hparams=ENTROPY),
    "cpu": dict(timesteps=500_000, seeds=4, passive=(5, 10, 20, 40), active=(5, 10, 20),
                policies=POLICIES, num_envs=16, num_steps=64, hparams=ENTROPY),
    # The same budget per run, 8 seeds, corridors up to Ni et al.'s 250-step range.
    "cpu-long": dict(timesteps=500_000, seeds=8, passive=(5, 10, 20, 40, 100, 250),
                     active=(5, 20, 100, 250), policies=POLICIES, num_envs=16, num_steps=64,
                     hparams=ENTROPY),
    # Whole 60-step episodes per window: RUDDER and hca_return read whole episodes.
    "ktd-smoke": dict(timesteps=16 * 60 * 4, seeds=2, passive=(), active=(), policies=(),
                      num_envs=16, num_steps=60, hparams=ENTROPY,
                      ktd=("PPO+GAE γ=1", "PPO+RUDDER")),
    "ktd-cpu": dict(timesteps=500_000, seeds=4, passive=(), active=(), policies=(),
                    num_envs=16, num_steps=60, hparams=ENTROPY,
                    ktd=tuple(label for label in KTD_LEARNERS if "RMA" not in label)),
    # TVT's key-to-door: batch 16 and one 120-step episode per update, as the reference.
    "tvt-smoke": dict(timesteps=16 * 120 * 3, seeds=2, passive=(), active=(), policies=(),
                      num_envs=16, num_steps=120, hparams=TVT_HPARAMS, ktd_preset="tvt",
                      ktd=("A2C+TVT (RMA)",)),
    "tvt-cpu": dict(timesteps=2_000_000, seeds=4, passive=(), active=(), policies=(),
                    num_envs=16, num_steps=120, hparams=TVT_HPARAMS, ktd_preset="tvt",
                    ktd=tuple(label for label in KTD_LEARNERS if "RMA" in label)),
}


@dataclasses.dataclass
class Args(X.OutputArgs):
    """Success rate on the passive and the active T-Maze by policy and length (module
    docstring)."""

    size: str = "cpu"
    """smoke | done | done-ent | cpu | cpu-long | ktd-smoke | ktd-cpu | tvt-smoke | tvt-cpu"""
    seeds: Optional[int] = None
    """seeds per run (default: the size's)"""
    policies: tuple[str, ...] = ()
    """policies (default: the size's): """ + ", ".join(POLICIES)
    passive: tuple[int, ...] = ()
    """corridor lengths of the passive maze (default: the size's)"""
    active: tuple[int, ...] = ()
    """corridor lengths of the active maze (default: the size's)"""
    ktd: tuple[str, ...] = ()
    """key-to-door learners (default: the size's): """ + ", ".join(KTD_LEARNERS)


def case(kind: str, length: int, policy: str, size: dict) -> X.Case:
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    updates = size["timesteps"] // (size["num_envs"] * size["num_steps"])
    config = TrainConfig(
        algo="ppo", env="TMaze",
        env_options=(("corridor_length", length), ("active", int(kind == "active"))),
        policy=policy, num_envs=size["num_envs"], num_steps=size["num_steps"],
        total_timesteps=size["timesteps"],
        evaluation=EvalConfig(every=max(1, updates // 20), episodes=32))
    return X.Case(name=f"{kind}_L{length}/{policy}", config=config,
                  settings=(dict(size["hparams"]),),
                  labels={"task": f"{kind} L={length}", "learner": policy})


def ktd_case(label: str, size: dict) -> X.Case:
    if label not in KTD_LEARNERS:
        raise ValueError(f"unknown key-to-door learner {label!r}; known: "
                         f"{', '.join(KTD_LEARNERS)}")
    preset, hparams, *fields = KTD_LEARNERS[label]
    task = size.get("ktd_preset", "cca")
    updates = size["timesteps"] // (size["num_envs"] * size["num_steps"])
    config = TrainConfig.from_flat(**learner_fields(preset, **{
        "env": "MemoryKeyToDoor", "env_options": (("preset", task),), "policy": "gru",
        "num_envs": size["num_envs"], "num_steps": size["num_steps"],
        "total_timesteps": size["timesteps"], "eval_every": max(1, updates // 20),
        "eval_episodes": 32, **(fields[0] if fields else {})}))
    slug = (label.replace("+", "_").replace(" ", "_").replace("γ=", "gamma")
            .replace("(", "").replace(")", ""))
    return X.Case(name=f"key_to_door/{slug}", config=config,
                  settings=({**size["hparams"], **hparams},),
                  labels={"task": f"MemoryKeyToDoor {task}", "learner": label})


def report(out: pathlib.Path, cases: list[X.Case], meta: dict) -> list[str]:
    tasks, learners, results = X.case_results(out, cases, METRIC)
    for c in cases:
        run_dir = out / c.name
        results[f"{c.labels['task']}|{c.labels['learner']}"].update(
            final_sampled=X.final(run_dir, "eval/success_rate", last=2).tolist(),
            final_return=X.final(run_dir, "eval/return_greedy", last=2).tolist())

    lines = [f"Memory vs credit, size '{meta['size']}' (T-Maze success: the final turn onto the "
             "cue's arm; key-to-door success: the door opened): "
             f"{meta['seeds']} seeds per cell, "
             f"{meta['timesteps']:,} env steps, {meta['num_envs']} envs × {meta['num_steps']} "
             f"steps per update, hyper-parameters {meta['hparams'] or 'the defaults'} (T-Maze: "
             "PPO+GAE; key-to-door: each learner's, γ as its label says); mean ± 95% CI "
             "(Student t) over seeds. In the T-Maze, chance (a memoryless walk to the junction "
             "that turns at random) is 0.5.", ""]
    for key, title in (("final", "Final greedy success rate (mean of the last 2 evaluations)"),
                       ("final_sampled", "Final sampled success rate (last 2 evaluations)"),
                       ("area", "Mean greedy success rate over training (area)"),
                       ("final_return", "Final greedy return (mean of the last 2 evaluations)"),
                       ("solved", "Share of seeds whose last greedy success rate ≥ 0.9")):
        lines += [f"### {title}", ""] + X.markdown_table(
            learners, tasks, X.result_cell(results, key, 2)) + [""]
    # Each size publishes files of its own into results/ (table_done.md, table_cpu.md, ...).
    files = [f"table_{meta['size']}.md", f"results_{meta['size']}.json",
             f"curves_{meta['size']}.png"]
    (out / files[0]).write_text("\n".join(lines) + "\n")
    (out / files[1]).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    X.plot_curve_panels(out / files[2], {t: {label: (results[f"{t}|{label}"]["env_steps"],
                                                    results[f"{t}|{label}"]["curve"])
                                            for label in learners} for t in tasks},
                        "greedy success rate")
    return files


def plan(args: Args, size: dict) -> tuple[list[X.Case], dict]:
    policies = args.policies or size["policies"]
    passive = args.passive or size["passive"]
    active = args.active or size["active"]
    cases = ([case("passive", L, p, size) for L in passive for p in policies]
             + [case("active", L, p, size) for L in active for p in policies]
             + [ktd_case(label, size) for label in args.ktd or size.get("ktd", ())])
    return cases, {"timesteps": size["timesteps"], "hparams": size["hparams"],
                   "num_envs": size["num_envs"], "num_steps": size["num_steps"],
                   "policies": list(policies), "passive": list(passive),
                   "active": list(active)}


def main(argv=None) -> int:
    return X.main("memory_vs_credit", HERE, Args, SIZES, plan, report, 2023, argv)


if __name__ == "__main__":
    sys.exit(main())
