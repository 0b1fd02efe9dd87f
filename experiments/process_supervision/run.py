"""Process vs outcome supervision on ArithmeticChain: best-of-N selection and step rewards in RL.

Part 1, **best-of-N** (Lightman et al. 2023, Fig. 3): a noisy solver with misconceptions
(``jaxcredit.envs.arithmetic_chain.noisy_solver``) writes solutions; an outcome reward model
(ORM, final-answer labels) and a process reward model (PRM, step labels up to the first error)
of the same network shape are fitted on the same solutions; a PRM fitted on a miscalibrated
labeller's step labels (``mul_as_add``: reads × as +, the solver's own misconception) is the
controlled ablation. On held-out problems each grader picks one of N sampled solutions; majority
voting over final answers and pass@N (some solution right) are the references. Accuracy against N
with bootstrap CIs over problems.

Part 2, **step rewards in RL**: PPO+GAE fused with the pipeline's redistribute stage, with
five reward signals, each over many seeds:

* ``outcome``: the exact outcome reward only (1 for a right final answer);
* ``PRM``: step rewards of a learned PRM (pre-trained on noisy-solver solutions, refitted each
  update on the agent's own steps with exact labels), the outcome dropped;
* ``PRM oracle``: step rewards of the exact labeller;
* ``PRM mul_as_add``: step rewards of a PRM trained the same way on the miscalibrated labeller's
  labels;
* ``hacked outcome``: the outcome reward of a grader that checks a surface property of the
  answer (its parity), not its correctness.

Reported: the *true* success rate (``eval/success_rate``: the final answer is right, whatever
the reward) and the *proxy* each learner optimises (the redistributed step score, or the hacked
grader's pass rate), against environment steps.

    python experiments/process_supervision/run.py --size smoke    # a few minutes
    python experiments/process_supervision/run.py --size cpu      # the committed results
    python experiments/process_supervision/run.py --size cpu --out DIR --publish

Outputs go to a new folder under ``runs/experiments/`` (or ``--out``, resumable); ``--publish``
copies the report into ``experiments/process_supervision/results/`` (``--force`` to replace).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxcredit import experiment as X
from jaxcredit.agents import TrainConfig
from jaxcredit.envs import arithmetic_chain as ac
from jaxcredit.envs import registry
from jaxcredit.presets import learner_fields
from jaxcredit.reward_models import best_of_n, models

HERE = pathlib.Path(__file__).resolve().parent
SLIP = (0.1, 0.1, 0.55)  # the noisy solver's slip rate on +, −, ×

SIZES = {
    "smoke": dict(steps=4, modulus=7, train_problems=1000, train_samples=4, fit_steps=300,
                  test_problems=100, pool=64, repeats=8, rl_steps=4, rl_modulus=7,
                  rl_timesteps=40_000, seeds=2, num_envs=64),
    "cpu": dict(steps=6, modulus=11, train_problems=16_000, train_samples=4, fit_steps=3000,
                test_problems=500, pool=1024, repeats=32, rl_steps=4, rl_modulus=7,
                rl_timesteps=1_000_000, seeds=8, num_envs=64),
}
# PPO on ArithmeticChain: a wider network and a higher learning rate than the CartPole defaults
# (the policy must learn a table of modular arithmetic).
RL_HPARAMS = dict(lr=1e-3, gamma=0.99, lambda_=0.95, ent_coef=0.05, redistributor_lr=1e-3)
# learner label -> (preset, extra TrainConfig fields, env options)
RL_LEARNERS = {
    "outcome": ("PPO+GAE", {}, ()),
    "PRM": ("PPO+PRM", {}, ()),
    "PRM oracle": ("PPO+PRM oracle", {}, ()),
    "PRM mul_as_add": ("PPO+PRM", {"redistribute_options": (("labeller", "mul_as_add"),)}, ()),
    "hacked outcome": ("PPO+GAE", {}, (("grader", "parity"),)),
}


@dataclasses.dataclass
class Args(X.OutputArgs):
    """Best-of-N and step rewards in RL on ArithmeticChain (module docstring)."""

    size: str = "cpu"
    """smoke | cpu"""
    seeds: Optional[int] = None
    """seeds per RL learner (default: the size's)"""
    rl: bool = True
    """run the RL part"""
    best_of_n: bool = True
    """run the best-of-N part"""


# ---------------------------------------------------------------------- part 1: best of N


def run_best_of_n(size: dict, seed: int = 0) -> dict:
    """Fits ORM, PRM and the miscalibrated PRM, scores held-out pools, returns curves."""
    env, _ = registry.make("ArithmeticChain", steps=size["steps"], modulus=size["modulus"])
    slip = ac.slip_rates_array(env, SLIP)
    key = jax.random.PRNGKey(seed)
    k_train, k_test, k_fit, k_select = jax.random.split(key, 4)
    train = ac.sample_solutions(k_train, env, slip, size["train_problems"], size["train_samples"])
    scorer = models.StepScorer(env.num_actions, (256, 256))
    fit = jax.jit(models.fit, static_argnums=(1, 2, 4, 5))
    # name -> (kind, labeller, fitting steps as a multiple of the size's); the ORM is also fitted
    # 4x longer, to see whether its shortfall is fitting budget.
    graders = {"PRM": ("prm", "none", 1), "ORM": ("orm", "none", 1),
               "PRM mul_as_add": ("prm", "mul_as_add", 1), "ORM 4x steps": ("orm", "none", 4)}
    params, fit_seconds, losses = {}, {}, {}
    for name, (kind, miscalibration, multiple) in graders.items():
        start = time.time()
        data = ac.grade_solutions(env, *train, miscalibration=miscalibration)
        params[name], loss = fit(k_fit, scorer, kind, data, multiple * size["fit_steps"], 256,
                                 1e-3)
        losses[name] = float(loss[-100:].mean())
        fit_seconds[name] = time.time() - start
    start, op, operand, written = ac.sample_solutions(k_test, env, slip, size["test_problems"],
                                                      size["pool"])
    truth = ac.chain_values(start, op, operand, env.modulus)[:, -1]
    correct = written[..., -1] == truth[:, None]
    labels = ac.step_labels(start[:, None], op[:, None], operand[:, None], written, env.modulus)
    consistent = ac.step_consistent(start[:, None], op[:, None], operand[:, None], written,
                                    env.modulus)
    labelled = ac.labels_from_consistency(consistent) != ac.AFTER_ERROR

    def in_blocks(fn):
        # Pools of 1024 solutions × K observations are scored 50 problems at a time.
        out = []
        for i in range(0, size["test_problems"], 50):
            block = slice(i, i + 50)
            obs, action = ac.solution_steps(env, start[block, None], op[block, None],
                                            operand[block, None], written[block])
            out.append(fn(obs, action, block))
        return jnp.concatenate(out)

    def scores_of(name, kind, how="product"):
        return in_blocks(lambda obs, action, _: models.solution_scores(
            scorer, params[name], kind, obs, action, how))

    def step_agreement(name):
        """Share of the exactly labelled steps where the PRM agrees with the exact judgement."""
        agree = in_blocks(lambda obs, action, block: jnp.sum(
            ((models.step_logits(scorer, params[name], obs, action) > 0) == consistent[block])
            & labelled[block])[None])
        return float(agree.sum() / labelled.sum())

    scores = {"PRM (product)": scores_of("PRM", "prm"), "PRM (min)": scores_of("PRM", "prm", "min"),
              "ORM": scores_of("ORM", "orm"), "ORM 4x steps": scores_of("ORM 4x steps", "orm"),
              "PRM mul_as_add": scores_of("PRM mul_as_add", "prm")}
    # The exact labeller as a PRM (product of 0/1 step judgements): the ceiling of process
    # supervision on this pool.
    scores["PRM oracle"] = consistent.all(-1).astype(jnp.float32)
    ns = [n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if n <= size["pool"]]
    curves = best_of_n.accuracy_curves(k_select, correct, written[..., -1], truth, scores, ns,
                                       env.num_actions, size["repeats"])
    lucky = (correct & (labels != ac.CORRECT).any(-1))
    summary = {name: [list(map(float, v)) for v in best_of_n.bootstrap_over_problems(c)]
               for name, c in curves.items()}
    return {
        "ns": ns, "curves": summary,
        "auroc": {name: best_of_n.auroc(np.asarray(score), np.asarray(correct))
                  for name, score in scores.items()},
        "pool": {"success": float(correct.mean()), "lucky": float(lucky.mean()),
                 "exact_rates": ac.noisy_solver_rates(env, SLIP)},
        "step_agreement_with_exact": {name: step_agreement(name)
                                      for name in ("PRM", "PRM mul_as_add")},
        "final_train_loss": losses, "fit_seconds": fit_seconds,
        "task": {"steps": size["steps"], "modulus": size["modulus"], "slip": SLIP,
                 "train_problems": size["train_problems"],
                 "train_samples": size["train_samples"], "fit_steps": size["fit_steps"],
                 "test_problems": size["test_problems"], "pool": size["pool"],
                 "repeats": size["repeats"]},
    }


# ---------------------------------------------------------------------- part 2: RL


def rl_case(label: str, size: dict) -> X.Case:
    preset, extra, env_options = RL_LEARNERS[label]
    updates = size["rl_timesteps"] // (size["num_envs"] * 16)
    config = TrainConfig.from_flat(
        **learner_fields(preset, **extra), env="ArithmeticChain",
        env_options=(("steps", size["rl_steps"]), ("modulus", size["rl_modulus"])) + env_options,
        num_envs=size["num_envs"], num_steps=16,
        total_timesteps=size["rl_timesteps"], hidden_sizes=(256, 256),
        eval_every=max(1, updates // 40), eval_episodes=256, redistribute_fit_steps=4)
    return X.Case(name=f"rl/{label.replace(' ', '_')}", config=config, settings=(RL_HPARAMS,),
                  labels={"learner": label})


def proxy_metric(label: str) -> str:
    if label in ("outcome", "hacked outcome"):
        return "eval/return"
    return "redistribute/step_score"


def report(out: pathlib.Path, cases: list[X.Case], meta: dict) -> list[str]:
    lines, files, results = [], [], {}
    bon_path = out / "best_of_n.json"
    if bon_path.exists():
        bon = json.loads(bon_path.read_text())
        results["best_of_n"] = bon
        task = bon["task"]
        lines += [f"## Best-of-N on ArithmeticChain (K = {task['steps']}, M = {task['modulus']})",
                  "",
                  f"Generator: the noisy solver, slip rates {tuple(task['slip'])} on (+, −, ×); "
                  f"its solutions are right {bon['pool']['success']:.3f} of the time "
                  f"(exact: {bon['pool']['exact_rates']['success']:.3f}), lucky guesses "
                  f"{bon['pool']['lucky']:.3f} (exact: {bon['pool']['exact_rates']['lucky']:.3f})."
                  f" Graders fitted on {task['train_problems']} problems × "
                  f"{task['train_samples']} solutions, {task['fit_steps']} Adam steps; "
                  f"{task['test_problems']} held-out problems, pools of {task['pool']}, "
                  f"{task['repeats']} subsets per N. Accuracy of the selected solution "
                  "(mean [95 % bootstrap CI over problems]).", ""]
        names = list(bon["curves"])
        ns = bon["ns"]

        def cell(n, name):
            mean, low, high = (v[ns.index(int(n))] for v in bon["curves"][name])
            return f"{mean:.3f} [{low:.3f}, {high:.3f}]"

        lines += X.markdown_table([str(n) for n in ns], names, cell) + [""]
        lines += ["Step agreement with the exact labels on the labelled steps of the held-out "
                  "pools: " + ", ".join(f"{k} {v:.3f}" for k, v in
                                        bon["step_agreement_with_exact"].items()) + ".", ""]
        if "auroc" in bon:
            lines += ["How well each grader's score separates right from wrong solutions over "
                      "the held-out pools (AUROC; 0.5 = chance): " + ", ".join(
                          f"{k} {v:.3f}" for k, v in bon["auroc"].items()) + ".", ""]
        lines += ["Final training loss (binary cross-entropy): " + ", ".join(
            f"{k} {v:.4f}" for k, v in bon["final_train_loss"].items()) + ".", ""]
        _plot_best_of_n(out / "best_of_n.png", bon)
        files += ["best_of_n.json", "best_of_n.png"]
    rl_cases = [c for c in cases]
    if rl_cases:
        size = meta["size_settings"]
        lines += [f"## Step rewards in RL (PPO+GAE, ArithmeticChain K = {size['rl_steps']}, "
                  f"M = {size['rl_modulus']})", "",
                  f"{meta['seeds']} seeds per learner, {size['rl_timesteps']:,} environment steps "
                  f"per seed ({size['num_envs']} environments × 16 steps per update); mean ± 95 % "
                  "CI over seeds of the last 3 evaluations (256 sampled episodes each).", "",
                  "| learner | true success rate | proxy it optimises | proxy value | "
                  "correct step rate | train seconds |", "|---|---|---|---|---|---|"]
        panels = {"true success rate": {}, "proxy": {}}
        for c in rl_cases:
            label, run = c.labels["learner"], out / c.name
            truth = X.final(run, "eval/success_rate", last=3)
            proxy_name = proxy_metric(label)
            proxy = X.final(run, proxy_name, last=3 if proxy_name.startswith("eval") else 16)
            try:
                steps_ok = X.mean_ci_cell(X.final(run, "redistribute/correct_step_rate",
                                                  last=16))
            except ValueError:
                steps_ok = ""
            seconds = meta["seconds"].get(c.name)
            lines.append(f"| {label} | {X.mean_ci_cell(truth)} | {proxy_name} | "
                         f"{X.mean_ci_cell(proxy)} | {steps_ok} | "
                         f"{'' if seconds is None else f'{seconds:.0f}'} |")
            x, y = X.curves(run, "eval/success_rate")
            panels["true success rate"][label] = (x, y)
            px, py = X.curves(run, proxy_name)
            panels["proxy"][label] = (px, py)
            results[label] = {"truth": truth.tolist(), "proxy": proxy.tolist(),
                              "proxy_metric": proxy_name, "env_steps": x.tolist(),
                              "truth_curve": y.tolist()}
        lines.append("")
        X.plot_curve_panels(out / "rl_curves.png", panels, "rate")
        files.append("rl_curves.png")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    return ["table.md", "results.json"] + files


def _plot_best_of_n(path: pathlib.Path, bon: dict) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name, (mean, low, high) in bon["curves"].items():
        ax.plot(bon["ns"], mean, label=name, marker="o", markersize=3,
                linestyle=":" if name == "pass@N" else X.line_style(name))
        ax.fill_between(bon["ns"], low, high, alpha=0.2)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (solutions per problem)")
    ax.set_ylabel("accuracy of the selected solution")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plan(args: Args, size: dict) -> tuple[list[X.Case], dict]:
    cases = [rl_case(label, size) for label in RL_LEARNERS] if args.rl else []
    return cases, {"size_settings": size, "rl_hparams": RL_HPARAMS, "slip": SLIP}


def best_of_n_part(out: pathlib.Path, args: Args, size: dict) -> None:
    """Part 1 (no engine run): best-of-N selection with each reward model, kept in
    ``out/best_of_n.json`` (a rerun with the same folder reuses it)."""
    if args.best_of_n and not (out / "best_of_n.json").exists():
        start = time.time()
        bon = run_best_of_n(size)
        bon["seconds"] = time.time() - start
        (out / "best_of_n.json").write_text(json.dumps(bon, indent=1))
        print(f"best-of-N done in {bon['seconds']:.0f} s")


def main(argv=None) -> int:
    return X.main("process_supervision", HERE, Args, SIZES, plan, report, 2023, argv,
                  prepare=best_of_n_part)


if __name__ == "__main__":
    sys.exit(main())
