"""Training throughput: jaxcredit's engine against PureJaxRL, against itself at an earlier
revision, and the cost of its fitted credit models, each race in one process.

    jaxcredit bench train [--quick] [--purejaxrl DIR | --purejaxrl-git DIR] [--baseline-rev REV]
    jaxcredit bench train --estimators hca_return,c2a2c,hca_state --fit-steps 1,4,16
    jaxcredit bench train --no-main --redistributors rudder --redistribute-fit-steps 1,4,16
    jaxcredit bench train --no-main --dqn --purejaxrl-git DIR
    python -m jaxcredit.bench train ...

Races (protocol in :mod:`jaxcredit.bench.timing`: compiled ahead of time, compile time apart,
calls alternating, SPS = env steps per call / median call time):

* **main** (``--no-main`` skips the PPO races): PPO+GAE on CartPole-v1 with PureJaxRL's
  defaults (4 envs × 128 steps, 4 epochs × 4 minibatches, 2 × 64 tanh MLPs, lr 2.5e-4
  annealed, 5e5 env steps, one seed). Rows: jaxcredit without evaluation (``eval_every=0``:
  the same work as the others), jaxcredit with its default evaluation, PureJaxRL from the
  user's checkout (``--purejaxrl``, :mod:`.purejaxrl`) and the jaxcredit engine of a git
  revision (``--baseline-rev``, :mod:`.baseline`). Without a PureJaxRL checkout that
  comparison is skipped and said so; no stored figure stands in for it.
* unless ``--quick``: the engine at 2048 envs, and ``jax.vmap`` over 16 seeds at 4 envs
  (aggregate SPS); with ``--compare-all`` PureJaxRL and the baseline revision race there too.
* ``--dqn``: the off-policy engine's DQN against PureJaxRL's ``dqn.py`` on CartPole-v1 with
  PureJaxRL's DQN defaults (10 envs, one env step per update, flashbax replay of 10 000, batch
  128, a gradient step every 10 env steps, target copy every 500 steps, 120-84 ReLU MLP, ε 1 →
  0.05 over 2.5e5 steps, lr 2.5e-4, learning from 10 000 steps), plain Q-learning target, no
  evaluation; at 1 seed and at ``--dqn-seeds`` vmapped. Needs ``--purejaxrl``/``--purejaxrl-git``.
* ``--estimators``: A2C with each estimator against A2C+GAE at one size, once per value of
  ``--fit-steps`` (the learned models' ``estimator_fit_steps``), without evaluation.
* ``--redistributors``: PPO (PureJaxRL's defaults, ``--redistributor-envs`` ×
  ``--redistributor-steps``) with each redistribute stage (RUDDER: ``rudder``) against PPO+GAE
  on ``--redistributor-env`` (a delayed-reward CartPole by default), once per value of
  ``--redistribute-fit-steps``, without evaluation.

Each row's ``time/step`` is its time per env step relative to the race's first row (for the main
race, jaxcredit without evaluation: PureJaxRL's 1.05 means jaxcredit is 1.05x as fast).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import tempfile
from typing import Annotated, Any, Optional

import jax
import jax.numpy as jnp
import tyro

from jaxcredit import agents as current
from jaxcredit import envs
from jaxcredit.bench import baseline as baseline_lib
from jaxcredit.bench import purejaxrl as purejaxrl_lib
from jaxcredit.bench.timing import Case, compile_case, race
from jaxcredit.flags import Repeatable, flat, parse_options
from jaxcredit.diagnostics.specs import EstimatorSpec, parse_specs
from jaxcredit.estimators import make_estimator
from jaxcredit.redistribute import make_redistributor

PPO_ENV = "CartPole-v1"
REDISTRIBUTOR_ENV = "DelayedReward-CartPole-v1"


@dataclasses.dataclass
class TrainBench:
    """Training throughput: the engine against PureJaxRL and against an earlier revision of
    itself, and the cost of the fitted credit models, each race in one process."""

    main: bool = True
    """the PPO races (--no-main: only the --estimators, --redistributors or --dqn races)"""
    quick: bool = False
    """only the first PPO race, 2 timed calls per case"""
    repeats: int = 5
    """timed calls per case (after one warm-up); SPS uses their median"""
    total_timesteps: float = 5e5
    """env steps per call in the main race (PureJaxRL's default)"""
    purejaxrl: Optional[str] = None
    """a PureJaxRL checkout (the folder holding purejaxrl/ppo.py) to race against"""
    purejaxrl_git: Optional[str] = None
    """a bare git directory of PureJaxRL to race against (its HEAD)"""
    baseline_rev: Optional[str] = None
    """a git revision of this checkout whose engine races the current one, e.g. 21c2ce5"""
    compare_all: bool = False
    """also race PureJaxRL and the baseline revision in the many-envs and many-seeds cases"""
    big_envs: tuple[int, ...] = (2048,)
    """envs of the many-envs cases (one race each)"""
    big_updates: int = 4
    """updates per call in the many-envs case"""
    seeds: tuple[int, ...] = (16,)
    """seeds of the vmapped many-seeds cases (one race each)"""
    seeds_timesteps: float = 1e5
    """env steps per seed in the many-seeds case"""
    dqn: bool = False
    """the DQN race against PureJaxRL's dqn.py (needs --purejaxrl or --purejaxrl-git)"""
    dqn_timesteps: float = 5e5
    """env steps per call in the DQN race (PureJaxRL's DQN default)"""
    dqn_seeds: int = 8
    """seeds of the vmapped DQN race (1 skips it)"""
    estimators: tuple[str, ...] = ()
    """race A2C with each estimator spec NAME[:KEY=VALUE...] (comma-separated) against A2C+GAE"""
    fit_steps: tuple[str, ...] = ("4",)
    """estimator_fit_steps values of the --estimators race, comma- or space-separated"""
    env: str = PPO_ENV
    """environment of the --estimators race"""
    env_options: Annotated[Repeatable, tyro.conf.arg(name="env-option")] = ()
    """options of that environment (KEY=VALUE, several allowed)"""
    estimator_envs: int = 256
    """envs of the --estimators race"""
    estimator_steps: int = 16
    """rollout length of the --estimators race"""
    estimator_updates: int = 50
    """updates per call in the --estimators race"""
    estimator_seeds: int = 1
    """seeds vmapped in one program in the --estimators race"""
    redistributors: tuple[str, ...] = ()
    """race PPO with each redistributor spec NAME[:KEY=VALUE...] (comma-separated) against
    PPO+GAE"""
    redistribute_fit_steps: tuple[str, ...] = ("4",)
    """redistribute_fit_steps values of the --redistributors race, comma- or space-separated"""
    redistributor_env: str = REDISTRIBUTOR_ENV
    """environment of the --redistributors race"""
    redistributor_envs: int = 4
    """envs of the --redistributors race"""
    redistributor_steps: int = 128
    """rollout length of the --redistributors race"""
    redistributor_updates: int = 50
    """updates per call in the --redistributors race"""
    gamma: float = 0.99
    """discount γ of every race (PureJaxRL's GAMMA too)"""
    lambda_: Annotated[float, tyro.conf.arg(name="lambda")] = 0.95
    """GAE λ of every race (PureJaxRL's GAE_LAMBDA too)"""
    seed: int = 0
    """timed call i uses seed + i"""
    json: Optional[str] = None
    """write every race's results to this JSON file"""


# ----------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------


def ppo_fields(num_envs: int, total_timesteps: int) -> dict:
    """PureJaxRL's PPO defaults as TrainConfig fields (the ones both engine revisions know)."""
    return dict(algo="ppo", env=PPO_ENV, num_envs=num_envs, num_steps=128,
                total_timesteps=total_timesteps, update_epochs=4, num_minibatches=4,
                hidden_sizes=(64, 64), activation="tanh", anneal_lr=True)


def engine_case(label: str, agents: Any, fields: dict, hparams: dict, seeds: int = 1,
                **extra: Any) -> Case:
    """A whole training run of an engine (``agents``: the current module or a baseline's)."""
    config = baseline_lib.make_config(agents, **fields)
    train = agents.make_train(config)
    hp = agents.Hparams.create(**hparams)
    steps = config.num_updates * config.steps_per_update * seeds
    if seeds == 1:
        return compile_case(label, train, lambda s: (jax.random.key(100 + s), hp), steps, **extra)
    stacked = jax.tree.map(lambda x: jnp.broadcast_to(x, (seeds,)), hp)
    return compile_case(label, jax.vmap(train),
                        lambda s: (jax.random.split(jax.random.key(100 + s), seeds), stacked),
                        steps, **extra)


def purejaxrl_case(label: str, ppo: Any, defaults: dict, hparams: dict, num_envs: int,
                   total_timesteps: int, seeds: int = 1) -> Case:
    """PureJaxRL's ``make_train`` with its defaults, at our size and γ, λ."""
    config = dict(defaults, DEBUG=False, NUM_ENVS=num_envs, TOTAL_TIMESTEPS=total_timesteps,
                  GAMMA=hparams["gamma"], GAE_LAMBDA=hparams["lambda_"])
    try:
        train = ppo.make_train(config)  # fills NUM_UPDATES
        steps = int(config["NUM_UPDATES"]) * config["NUM_STEPS"] * num_envs * seeds
        if seeds == 1:
            return compile_case(label, train, lambda s: (jax.random.PRNGKey(100 + s),), steps)
        return compile_case(label, jax.vmap(train),
                            lambda s: (jax.random.split(jax.random.PRNGKey(100 + s), seeds),),
                            steps)
    except Exception as err:  # noqa: BLE001 (third-party code: any failure is one message)
        raise ValueError(f"PureJaxRL's make_train does not build here: {type(err).__name__}: "
                         f"{' '.join(str(err).split())[:300]}") from None


@dataclasses.dataclass
class Rivals:
    """What the current engine races against: PureJaxRL's ``ppo`` module and defaults, and a
    baseline revision's ``agents`` module (each None if not asked for)."""

    ppo: Any = None
    ppo_defaults: Optional[dict] = None
    ppo_label: str = ""
    dqn: Any = None
    dqn_defaults: Optional[dict] = None
    baseline: Any = None
    baseline_label: str = ""


def rival_cases(rivals: Rivals, hparams: dict, num_envs: int, total_timesteps: int,
                seeds: int = 1) -> list[Case]:
    cases = []
    if rivals.ppo is not None:
        cases.append(purejaxrl_case(rivals.ppo_label, rivals.ppo, rivals.ppo_defaults, hparams,
                                    num_envs, total_timesteps, seeds))
    if rivals.baseline is not None:
        cases.append(engine_case(rivals.baseline_label, rivals.baseline,
                                 ppo_fields(num_envs, total_timesteps), hparams, seeds))
    return cases


# ----------------------------------------------------------------------------------------------
# Races
# ----------------------------------------------------------------------------------------------


def race_result(name: str, cases: list[Case]) -> dict:
    """The race's rows, each with its time per env step relative to the first row."""
    reference = cases[0].sps
    rows = [dict(case.summary(), time_per_step_vs_first=round(reference / case.sps, 3))
            for case in cases]
    return {"race": name, "reference": cases[0].label, "cases": rows}


def format_race(result: dict) -> str:
    """A plain-text table of one race."""
    width = max(24, *(len(c["label"]) for c in result["cases"]))
    head = f"{'case':<{width}} {'SPS':>11} {'compile s':>9} {'median s':>9} {'time/step':>9}"
    lines = [f"{result['race']} (time/step relative to {result['reference']})", head,
             "-" * len(head)]
    for c in result["cases"]:
        lines.append(f"{c['label']:<{width}} {c['sps']:>11,} {c['compile_s']:>9.2f} "
                     f"{c['run_s_median']:>9.3f} {c['time_per_step_vs_first']:>9.2f}")
    return "\n".join(lines)


def main_race(args: TrainBench, rivals: Rivals, hparams: dict, repeats: int) -> dict:
    total = int(args.total_timesteps)
    cases = [
        engine_case("jaxcredit", current, dict(ppo_fields(4, total), eval_every=0), hparams),
        engine_case("jaxcredit, evaluating", current, ppo_fields(4, total), hparams),
        *rival_cases(rivals, hparams, 4, total),
    ]
    result = race_result(f"PPO+GAE {PPO_ENV}, 4 envs, {total:,} steps", race(cases, repeats,
                                                                               args.seed))
    ours = result["cases"][0]["sps"]
    result["ratios"] = {f"jaxcredit/{c['label']}": round(ours / c["sps"], 3)
                        for c in result["cases"][1:]}
    return result


def scale_races(args: TrainBench, rivals: Rivals, hparams: dict, repeats: int) -> list[dict]:
    """The many-envs and the many-seeds cases."""
    results = []
    seed_steps = int(args.seeds_timesteps)
    shapes = [(f"PPO+GAE {PPO_ENV}, {envs} envs", envs, envs * 128 * args.big_updates, 1)
              for envs in args.big_envs]
    shapes += [(f"PPO+GAE {PPO_ENV}, 4 envs x {seeds} seeds vmapped", 4, seed_steps, seeds)
               for seeds in args.seeds]
    for name, num_envs, steps, seeds in shapes:
        cases = [engine_case("jaxcredit", current, dict(ppo_fields(num_envs, steps),
                                                        eval_every=0), hparams, seeds)]
        if args.compare_all:
            cases += rival_cases(rivals, hparams, num_envs, steps, seeds)
        results.append(race_result(name, race(cases, repeats, args.seed)))
    return results


def dqn_fields(defaults: dict, total_timesteps: int) -> tuple[dict, dict]:
    """PureJaxRL's DQN defaults as the engine's ``(TrainConfig fields, Hparams)``."""
    num_envs = int(defaults["NUM_ENVS"])
    every = int(defaults["TRAINING_INTERVAL"])
    if every % num_envs:
        raise ValueError(f"PureJaxRL's TRAINING_INTERVAL={every} is not a multiple of its "
                         f"NUM_ENVS={num_envs}; the engine trains after whole updates")
    fields = dict(algo="dqn", estimator="q_learning", env=PPO_ENV, num_envs=num_envs,
                  num_steps=every // num_envs, total_timesteps=total_timesteps,
                  buffer_size=int(defaults["BUFFER_SIZE"]),
                  batch_size=int(defaults["BUFFER_BATCH_SIZE"]),
                  learning_starts=int(defaults["LEARNING_STARTS"]), gradient_steps=1,
                  target_update_every=max(1, int(defaults["TARGET_UPDATE_INTERVAL"]) // every),
                  hidden_sizes=(120, 84), activation="relu",
                  anneal_lr=bool(defaults.get("LR_LINEAR_DECAY", False)), eval_every=0)
    hparams = dict(lr=defaults["LR"], gamma=defaults["GAMMA"], tau=defaults["TAU"],
                   epsilon_start=defaults["EPSILON_START"],
                   epsilon_end=defaults["EPSILON_FINISH"],
                   epsilon_fraction=min(1.0, defaults["EPSILON_ANNEAL_TIME"] / total_timesteps),
                   max_grad_norm=1e6)  # PureJaxRL's DQN does not clip
    return fields, hparams


def dqn_races(args: TrainBench, rivals: Rivals, repeats: int) -> list[dict]:
    """The DQN engine against PureJaxRL's DQN, at 1 seed and at ``--dqn-seeds`` vmapped."""
    total = int(args.dqn_timesteps)
    fields, hparams = dqn_fields(rivals.dqn_defaults, total)
    results = []
    for seeds in sorted({1, args.dqn_seeds}):
        config = dict(rivals.dqn_defaults, TOTAL_TIMESTEPS=total, NUM_SEEDS=seeds,
                      WANDB_MODE="disabled")
        train = rivals.dqn.make_train(config)  # fills NUM_UPDATES
        steps = int(config["NUM_UPDATES"]) * int(config["NUM_ENVS"]) * seeds
        if seeds == 1:
            theirs = compile_case(rivals.ppo_label or "purejaxrl", train,
                                  lambda s: (jax.random.PRNGKey(100 + s),), steps)
        else:
            theirs = compile_case(rivals.ppo_label or "purejaxrl", jax.vmap(train),
                                  lambda s: (jax.random.split(jax.random.PRNGKey(100 + s),
                                                              seeds),), steps)
        cases = [engine_case("jaxcredit dqn", current, fields, hparams, seeds), theirs]
        name = f"DQN {PPO_ENV}, {fields['num_envs']} envs, {total:,} steps, {seeds} seed(s)"
        result = race_result(name, race(cases, repeats, args.seed))
        result["ratios"] = {f"jaxcredit/{cases[1].label}": round(
            result["cases"][0]["sps"] / result["cases"][1]["sps"], 3)}
        results.append(result)
    return results


def stage_races(title: str, base: dict, stage: str, specs: tuple[EstimatorSpec, ...],
                learned: dict[str, bool], fit_steps: list[int], hparams: dict, repeats: int,
                seed: int, reference: Optional[str] = None, seeds: int = 1) -> list[dict]:
    """``base`` (first row, "gae") against ``base`` with each spec as its pipeline ``stage``
    (``"estimator"`` or ``"redistribute"``), once per ``{stage}_fit_steps`` value.

    A spec without a fitted model (``learned[label]`` False) does not depend on the fitting steps
    and races once; the stage's ``reference`` name without options is the first row already.
    """
    fit_field = f"{stage}_fit_steps"
    results = []
    for i, k in enumerate(fit_steps):
        cases = [engine_case("gae", current, base, hparams, seeds, **{stage: reference})]
        for spec in specs:
            if spec.name == reference and not spec.options or not (learned[spec.label] or i == 0):
                continue
            fields = dict(base, **{stage: spec.name, f"{stage}_options": spec.options,
                                   fit_field: k})
            cases.append(engine_case(spec.label, current, fields, hparams, seeds,
                                     **{stage: spec.label,
                                        fit_field: k if learned[spec.label] else None}))
        results.append(race_result(f"{title}, {fit_field}={k}", race(cases, repeats, seed)))
    return results


def estimator_races(args: TrainBench, specs: tuple[EstimatorSpec, ...], fit_steps: list[int],
                    env_options: tuple, hparams: dict, repeats: int) -> list[dict]:
    """A2C with each estimator against A2C+GAE, once per ``estimator_fit_steps`` value."""
    num_envs, num_steps = args.estimator_envs, args.estimator_steps
    base = dict(algo="a2c", env=args.env, env_options=env_options, num_envs=num_envs,
                num_steps=num_steps, total_timesteps=num_envs * num_steps * args.estimator_updates,
                eval_every=0, estimator="gae")
    # Estimators that read the environment (cocoa_reward's reward values) are given it, as in
    # the engine.
    env, env_params = envs.make(args.env, **dict(env_options))
    context = {"env": env, "env_params": env_params}
    learned = {s.label: make_estimator(s.name, context, **dict(s.options)).learned
               for s in specs}
    title = (f"A2C {args.env}, {num_envs} envs x {num_steps} steps, "
             f"{args.estimator_updates} updates"
             + (f", {args.estimator_seeds} seeds vmapped" if args.estimator_seeds > 1 else ""))
    return stage_races(title, base, "estimator", specs, learned, fit_steps, hparams, repeats,
                       args.seed, reference="gae", seeds=args.estimator_seeds)


def redistributor_fields(args: TrainBench) -> dict:
    """PPO+GAE of the --redistributors race: PureJaxRL's PPO at that race's size and env."""
    num_envs, num_steps = args.redistributor_envs, args.redistributor_steps
    total = num_envs * num_steps * args.redistributor_updates
    return dict(ppo_fields(num_envs, total), env=args.redistributor_env, num_steps=num_steps,
                estimator="gae", eval_every=0)


def redistributor_races(args: TrainBench, specs: tuple[EstimatorSpec, ...],
                        fit_steps: list[int], hparams: dict, repeats: int) -> list[dict]:
    """PPO with each redistributor against PPO+GAE, once per ``redistribute_fit_steps`` value."""
    learned = {s.label: make_redistributor(s.name, **dict(s.options)).learned for s in specs}
    title = (f"PPO {args.redistributor_env}, {args.redistributor_envs} envs x "
             f"{args.redistributor_steps} steps, {args.redistributor_updates} updates")
    return stage_races(title, redistributor_fields(args), "redistribute", specs, learned,
                       fit_steps, hparams, repeats, args.seed)


# ----------------------------------------------------------------------------------------------
# Command
# ----------------------------------------------------------------------------------------------


def _positive(name: str, value: float) -> None:
    if not value > 0 or value != int(value):
        raise ValueError(f"{name} must be a positive whole number, got {value:g}")


def parse_fit_steps(items: tuple[str, ...], flag: str = "--fit-steps") -> list[int]:
    """``("1,4", "16")`` -> ``[1, 4, 16]``; a ValueError on anything but non-negative integers."""
    values = [v.strip() for item in items for v in item.split(",") if v.strip()]
    if not values or not all(v.isdigit() for v in values):
        raise ValueError(f"{flag} takes non-negative integers, got {' '.join(items)!r}")
    return list(dict.fromkeys(int(v) for v in values))


@dataclasses.dataclass(frozen=True)
class Checked:
    """The parsed and validated input of the races."""

    hparams: dict
    specs: tuple[EstimatorSpec, ...]
    fit_steps: list[int]
    env_options: tuple
    redistributors: tuple[EstimatorSpec, ...]
    redistribute_fit_steps: list[int]


def check_redistributors(args: TrainBench) -> tuple[tuple[EstimatorSpec, ...], list[int]]:
    """The --redistributors specs and fit steps, each race's config validated."""
    specs = parse_specs(args.redistributors)
    fit_steps = parse_fit_steps(args.redistribute_fit_steps, "--redistribute-fit-steps")
    base = redistributor_fields(args)
    if specs:
        envs.make(args.redistributor_env)  # unknown environment
    for spec in specs:
        make_redistributor(spec.name, **dict(spec.options))  # unknown name or bad option
        for k in fit_steps:
            baseline_lib.make_config(current, **dict(
                base, redistribute=spec.name, redistribute_options=spec.options,
                redistribute_fit_steps=k))
    return specs, fit_steps


def check(args: TrainBench) -> Checked:
    """Validates everything before anything is compiled."""
    hparams = {"gamma": args.gamma, "lambda_": args.lambda_}
    current.Hparams.create(**hparams)  # one-line ValueError out of range
    for name in ("repeats", "total_timesteps", "big_updates", "seeds_timesteps",
                 "estimator_envs", "estimator_steps", "estimator_updates", "estimator_seeds",
                 "redistributor_envs", "redistributor_steps", "redistributor_updates"):
        _positive(name, getattr(args, name))
    for name in ("big_envs", "seeds"):
        for value in getattr(args, name):
            _positive(name, value)
    if args.purejaxrl and args.purejaxrl_git:
        raise ValueError("give --purejaxrl or --purejaxrl-git, not both")
    if args.json and pathlib.Path(args.json).is_dir():
        raise ValueError(f"--json {args.json} is a folder; give a file path")
    if not (args.main or args.estimators or args.redistributors or args.dqn):
        raise ValueError("--no-main leaves nothing to run; add --estimators, --redistributors "
                         "or --dqn")
    if args.dqn and not (args.purejaxrl or args.purejaxrl_git):
        raise ValueError("--dqn races PureJaxRL's dqn.py: pass --purejaxrl DIR or "
                         "--purejaxrl-git DIR")
    _positive("dqn_timesteps", args.dqn_timesteps)
    _positive("dqn_seeds", args.dqn_seeds)
    specs = parse_specs(args.estimators)
    fit_steps = parse_fit_steps(args.fit_steps)
    env_options = parse_options(flat(args.env_options), "--env-option")
    env, env_params = envs.make(args.env, **dict(env_options))  # unknown environment or option
    for spec in specs:  # unknown name or bad option
        make_estimator(spec.name, {"env": env, "env_params": env_params}, **dict(spec.options))
    return Checked(hparams, specs, fit_steps, env_options, *check_redistributors(args))


def load_rivals(args: TrainBench, workdir: pathlib.Path) -> Rivals:
    rivals = Rivals()
    if args.purejaxrl or args.purejaxrl_git:
        files = purejaxrl_lib.FILES + ((purejaxrl_lib.DQN_FILE,) if args.dqn else ())
        if args.purejaxrl:
            folder = purejaxrl_lib.source_folder(args.purejaxrl)
            revision = purejaxrl_lib.describe(folder)
        else:
            folder = purejaxrl_lib.export_from_git(args.purejaxrl_git, workdir, files=files)
            revision = purejaxrl_lib.describe(folder, args.purejaxrl_git)
        rivals.ppo, rivals.ppo_defaults = purejaxrl_lib.load_ppo(folder)
        rivals.ppo_label = f"purejaxrl {revision}"
        if args.dqn:
            rivals.dqn, rivals.dqn_defaults = purejaxrl_lib.load_dqn(folder)
    if args.baseline_rev:
        rivals.baseline, short = baseline_lib.import_revision(args.baseline_rev, workdir)
        rivals.baseline_label = f"jaxcredit {short}"
    return rivals


def bench(args: TrainBench) -> dict:
    """Runs the races of ``args``, prints their tables and returns everything (also written to
    ``--json``)."""
    checked = check(args)
    hparams = checked.hparams
    repeats = 2 if args.quick else args.repeats
    payload: dict[str, Any] = {"backend": jax.default_backend(),
                               "device": jax.devices()[0].device_kind, "jax": jax.__version__,
                               "xla_flags": os.environ.get("XLA_FLAGS", ""), "repeats": repeats,
                               "gamma": args.gamma, "lambda": args.lambda_, "races": []}

    def report(result: dict) -> None:
        payload["races"].append(result)
        print("\n" + format_race(result), flush=True)

    with tempfile.TemporaryDirectory(prefix="jaxcredit_bench_") as tmp:
        rivals = load_rivals(args, pathlib.Path(tmp))  # bad paths and revisions fail here
        print(f"jaxcredit training benchmark on {payload['backend']} ({payload['device']}), "
              f"jax {jax.__version__}, XLA_FLAGS={payload['xla_flags']!r}; median of {repeats} "
              "calls after one warm-up, compile separate", flush=True)
        if args.main:
            payload["purejaxrl"] = rivals.ppo_label or "skipped (no --purejaxrl checkout)"
            payload["baseline"] = rivals.baseline_label or None
            result = main_race(args, rivals, hparams, repeats)
            report(result)
            for label, ratio in result["ratios"].items():
                print(f"SPS ratio {label}: {ratio:.3f} (same process, alternating calls)")
            if rivals.ppo is None:
                print("PureJaxRL comparison skipped: pass --purejaxrl DIR (a checkout of "
                      "luchris429/purejaxrl) or --purejaxrl-git DIR")
            if not args.quick:
                for result in scale_races(args, rivals, hparams, repeats):
                    report(result)
        if args.dqn:
            for result in dqn_races(args, rivals, repeats):
                report(result)
                for label, ratio in result["ratios"].items():
                    print(f"SPS ratio {label}: {ratio:.3f} (same process, alternating calls)")
    for result in (estimator_races(args, checked.specs, checked.fit_steps, checked.env_options,
                                   hparams, repeats) if checked.specs else ()):
        report(result)
    for result in (redistributor_races(args, checked.redistributors,
                                       checked.redistribute_fit_steps, hparams, repeats)
                   if checked.redistributors else ()):
        report(result)
    if args.json:
        path = pathlib.Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {path}")
    return payload
