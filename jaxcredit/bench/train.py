"""Training throughput: jaxcredit's engine against PureJaxRL, against itself at an earlier
revision, and the cost of its fitted credit models, each race in one process.

    jaxcredit bench train [--quick] [--purejaxrl DIR | --purejaxrl-git DIR] [--baseline-rev REV]
    jaxcredit bench train --estimators hca_return,c2a2c,hca_state --fit-steps 1,4,16
    jaxcredit bench train --no-main --redistributors rudder --redistribute-fit-steps 1,4,16
    jaxcredit bench train --no-main --dqn --purejaxrl-git DIR
    jaxcredit bench train --no-main --rnn --purejaxrl-git DIR
    jaxcredit bench train --no-main --continuous --purejaxrl-git DIR
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
* ``--rnn``: recurrent PPO (``--policy gru``) against PureJaxRL's ``ppo_rnn.py`` on its own
  defaults (CartPole-v1, 4 envs × 128 steps, 4 epochs × 4 minibatches of whole sequences, a
  128-unit ReLU embedding, GRU and heads, lr 2.5e-4 annealed, 5e5 env steps, one seed), no
  evaluation. Needs ``--purejaxrl``/``--purejaxrl-git``.
* ``--continuous``: continuous PPO (``--action-dist gaussian``, running normalisation) against
  PureJaxRL's ``ppo_continuous_action.py`` on its own settings (4 epochs × 32 minibatches,
  10-step rollouts, two 256-256 tanh towers with a state-independent log σ, lr 3e-4 not
  annealed, entropy 0, observations and rewards normalised), on ``--continuous-env`` (a task of
  jaxcredit's registry with ``Box`` actions, Pendulum-v1 by default: its script trains on Brax,
  and runs unchanged on the task through the bridge of :mod:`.purejaxrl`; both engines step the
  same task, with actions in [−1, 1] scaled onto its bounds). Its own size, 2048 envs × 5e7
  steps, is the default on an accelerator; on CPU 64 envs × 1e5 steps (``--continuous-envs``,
  ``--continuous-timesteps``). One seed, no evaluation; each row also gives the final return of
  every timed run (the episodes that ended in its last tenth), to show that the two programs
  learn alike. Needs ``--purejaxrl``/``--purejaxrl-git``. What the two programs still compute
  differently: at a time-out (all of Pendulum's episode ends) jaxcredit bootstraps from
  V(s'_{t+1}), for which it runs its critic a second time over the window's final
  observations, and PureJaxRL treats the end as terminal; jaxcredit's running return for the
  reward scale adds the step's reward before an episode's end resets it (Gymnasium's
  ``NormalizeReward``), PureJaxRL's resets it first; jaxcredit reduces its metrics to scalars
  per update, PureJaxRL returns its wrappers' per-step ``info`` ([updates, steps, envs] arrays);
  their random streams differ, so no run is the same number for number.
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
import tyro

from jaxcredit import agents as current
from jaxcredit import envs
from jaxcredit.bench import baseline as baseline_lib
from jaxcredit.bench import purejaxrl as purejaxrl_lib
from jaxcredit.bench.races import (CONTINUOUS_ENV, PPO_ENV, REDISTRIBUTOR_ENV, Rivals,
                                   continuous_race, dqn_races, estimator_races, format_race,
                                   main_race, pqn_race, redistributor_fields,
                                   redistributor_races, rnn_race, scale_races)
from jaxcredit.flags import Repeatable, flat, parse_options
from jaxcredit.diagnostics.specs import EstimatorSpec, parse_specs
from jaxcredit.estimators import make_estimator
from jaxcredit.redistribute import make_redistributor



@dataclasses.dataclass
class TrainBench:
    """Training throughput: the engine against PureJaxRL and against an earlier revision of
    itself, and the cost of the fitted credit models, each race in one process."""

    main: bool = True
    """the PPO races (--no-main: only the --estimators, --redistributors, --dqn or --rnn
    races)"""
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
    rnn: bool = False
    """the recurrent PPO race against PureJaxRL's ppo_rnn.py (needs --purejaxrl or
    --purejaxrl-git)"""
    rnn_timesteps: Optional[float] = None
    """env steps per call in the recurrent race (default: ppo_rnn.py's own, 5e5)"""
    pqn: bool = False
    """the PQN race against purejaxql's pqn_gymnax.py on its CartPole settings (needs
    --purejaxql-git)"""
    purejaxql_git: Optional[str] = None
    """a bare git directory of purejaxql (mttga/purejaxql) to race PQN against (its HEAD)"""
    continuous: bool = False
    """the continuous PPO race against PureJaxRL's ppo_continuous_action.py (needs --purejaxrl
    or --purejaxrl-git)"""
    continuous_env: str = CONTINUOUS_ENV
    """task of the continuous race (jaxcredit's registry, Box actions)"""
    continuous_envs: Optional[int] = None
    """envs of the continuous race (default: its own 2048 on an accelerator, 64 on CPU)"""
    continuous_timesteps: Optional[float] = None
    """env steps per call in the continuous race (default: its own 5e7 on an accelerator, 1e5
    on CPU)"""
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
    for name in ("rnn_timesteps", "continuous_envs", "continuous_timesteps"):
        if getattr(args, name) is not None:
            _positive(name, getattr(args, name))
    for name in ("big_envs", "seeds"):
        for value in getattr(args, name):
            _positive(name, value)
    if args.purejaxrl and args.purejaxrl_git:
        raise ValueError("give --purejaxrl or --purejaxrl-git, not both")
    if args.json and pathlib.Path(args.json).is_dir():
        raise ValueError(f"--json {args.json} is a folder; give a file path")
    if args.rnn and not (args.purejaxrl or args.purejaxrl_git):
        raise ValueError("--rnn races PureJaxRL's ppo_rnn.py: pass --purejaxrl DIR or "
                         "--purejaxrl-git DIR")
    if args.continuous and not (args.purejaxrl or args.purejaxrl_git):
        raise ValueError("--continuous races PureJaxRL's ppo_continuous_action.py: pass "
                         "--purejaxrl DIR or --purejaxrl-git DIR")
    if args.continuous:
        purejaxrl_lib.continuous_task(args.continuous_env)  # unknown, or not continuous
    if not (args.main or args.estimators or args.redistributors or args.dqn or args.rnn
            or args.continuous or args.pqn):
        raise ValueError("--no-main leaves nothing to run; add --estimators, --redistributors, "
                         "--dqn, --rnn, --continuous or --pqn")
    if args.pqn and not args.purejaxql_git:
        raise ValueError("--pqn races purejaxql's pqn_gymnax.py: pass --purejaxql-git DIR")
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
        files = (purejaxrl_lib.FILES + ((purejaxrl_lib.DQN_FILE,) if args.dqn else ())
                 + ((purejaxrl_lib.RNN_FILE,) if args.rnn else ())
                 + ((purejaxrl_lib.CONTINUOUS_FILE,) if args.continuous else ()))
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
        if args.rnn:
            rivals.rnn, rivals.rnn_defaults = purejaxrl_lib.load_ppo(folder,
                                                                     purejaxrl_lib.RNN_FILE)
        if args.continuous:
            rivals.continuous, rivals.continuous_defaults = purejaxrl_lib.load_ppo(
                folder, purejaxrl_lib.CONTINUOUS_FILE)
    if args.pqn:
        rivals.pqn, rivals.pqn_defaults, rivals.pqn_label = purejaxrl_lib.load_pqn(
            args.purejaxql_git, workdir)
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
        if args.rnn:
            result = rnn_race(args, rivals, repeats)
            report(result)
            for label, ratio in result["ratios"].items():
                print(f"SPS ratio {label}: {ratio:.3f} (same process, alternating calls)")
        if args.continuous:
            result = continuous_race(args, rivals, repeats)
            report(result)
            for label, ratio in result["ratios"].items():
                print(f"SPS ratio {label}: {ratio:.3f} (same process, alternating calls)")
            for case in result["cases"]:
                print(f"final return {case['label']}: median {case['score_median']:.1f} of "
                      f"{case['score_all']} ({result['score']})")
        if args.dqn:
            for result in dqn_races(args, rivals, repeats):
                report(result)
                for label, ratio in result["ratios"].items():
                    print(f"SPS ratio {label}: {ratio:.3f} (same process, alternating calls)")
        if args.pqn:
            result = pqn_race(args, rivals, repeats)
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
