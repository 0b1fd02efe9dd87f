"""The cases and races of ``jaxcredit bench train`` (the command and its flags:
:mod:`jaxcredit.bench.train`, which documents every race).

A *case* is one compiled training program with its work per call (:class:`~.timing.Case`); a
*race* runs its cases in one process under the protocol of :mod:`jaxcredit.bench.timing` and
reports each one's env steps per second against the first. The rivals (PureJaxRL's scripts, the
engine of an earlier revision) are loaded by the command and passed in as :class:`Rivals`.
Functions that take ``args`` read the parsed flags (``bench.train.TrainBench``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxcredit import agents as current
from jaxcredit import envs
from jaxcredit.bench import baseline as baseline_lib
from jaxcredit.bench import purejaxrl as purejaxrl_lib
from jaxcredit.bench.timing import Case, compile_case, race
from jaxcredit.diagnostics.specs import EstimatorSpec
from jaxcredit.estimators import make_estimator
from jaxcredit.redistribute import make_redistributor

PPO_ENV = "CartPole-v1"
CONTINUOUS_ENV = "Pendulum-v1"
CONTINUOUS_CPU_SIZE = (64, 100_000)  # (envs, env steps) of the continuous race on CPU
REDISTRIBUTOR_ENV = "DelayedReward-CartPole-v1"


# ----------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------


def ppo_fields(num_envs: int, total_timesteps: int) -> dict:
    """PureJaxRL's PPO defaults as TrainConfig fields (the ones both engine revisions know)."""
    return dict(algo="ppo", env=PPO_ENV, num_envs=num_envs, num_steps=128,
                total_timesteps=total_timesteps, update_epochs=4, num_minibatches=4,
                hidden_sizes=(64, 64), activation="tanh", anneal_lr=True)


def engine_case(label: str, agents: Any, fields: dict, hparams: dict, seeds: int = 1,
                env: Optional[tuple] = None, score: Optional[Callable] = None,
                **extra: Any) -> Case:
    """A whole training run of an engine (``agents``: the current module or a baseline's);
    ``env``: an ``(env, env_params)`` instance to train on instead of ``fields["env"]``."""
    config = baseline_lib.make_config(agents, **fields)
    train = agents.make_train(config, *env) if env is not None else agents.make_train(config)
    hp = agents.Hparams.create(**hparams)
    steps = config.num_updates * config.steps_per_update * seeds
    if seeds == 1:
        return compile_case(label, train, lambda s: (jax.random.key(100 + s), hp), steps,
                            score, **extra)
    stacked = jax.tree.map(lambda x: jnp.broadcast_to(x, (seeds,)), hp)
    return compile_case(label, jax.vmap(train),
                        lambda s: (jax.random.split(jax.random.key(100 + s), seeds), stacked),
                        steps, **extra)


def purejaxrl_case(label: str, ppo: Any, defaults: dict, hparams: dict, num_envs: int,
                   total_timesteps: int, seeds: int = 1, score: Optional[Callable] = None) -> Case:
    """PureJaxRL's ``make_train`` with its defaults, at our size and γ, λ."""
    config = dict(defaults, DEBUG=False, NUM_ENVS=num_envs, TOTAL_TIMESTEPS=total_timesteps,
                  GAMMA=hparams["gamma"], GAE_LAMBDA=hparams["lambda_"])
    try:
        train = ppo.make_train(config)  # fills NUM_UPDATES
        steps = int(config["NUM_UPDATES"]) * config["NUM_STEPS"] * num_envs * seeds
        if seeds == 1:
            return compile_case(label, train, lambda s: (jax.random.PRNGKey(100 + s),), steps,
                                score)
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
    rnn: Any = None
    rnn_defaults: Optional[dict] = None
    continuous: Any = None
    continuous_defaults: Optional[dict] = None
    pqn: Any = None
    pqn_defaults: Optional[dict] = None
    pqn_label: str = ""
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


def main_race(args: Any, rivals: Rivals, hparams: dict, repeats: int) -> dict:
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


def scale_races(args: Any, rivals: Rivals, hparams: dict, repeats: int) -> list[dict]:
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


def dqn_races(args: Any, rivals: Rivals, repeats: int) -> list[dict]:
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
        results.append(pair_race(name, cases, repeats, args.seed))
    return results


def pair_race(name: str, cases: list[Case], repeats: int, seed: int) -> dict:
    """The race of jaxcredit's case against one rival, with the SPS ratio of the two."""
    result = race_result(name, race(cases, repeats, seed))
    result["ratios"] = {f"jaxcredit/{cases[1].label}": round(
        result["cases"][0]["sps"] / result["cases"][1]["sps"], 3)}
    return result


def pqn_fields(defaults: dict) -> tuple[dict, dict]:
    """purejaxql's PQN settings (``pqn_cartpole.yaml``) as the engine's ``(TrainConfig fields,
    Hparams)``: its ``HIDDEN_SIZE`` × ``NUM_LAYERS`` LayerNorm ReLU network, reward scale, and
    ε decayed over ``EPS_DECAY`` of ``TOTAL_TIMESTEPS_DECAY``."""
    total = int(float(defaults["TOTAL_TIMESTEPS"]))
    if defaults.get("NORM_TYPE", "layer_norm") != "layer_norm":
        raise ValueError(f"purejaxql's NORM_TYPE={defaults['NORM_TYPE']!r}: the engine's PQN "
                         "normalises by LayerNorm only")
    fields = dict(algo="pqn", env=defaults["ENV_NAME"], num_envs=int(defaults["NUM_ENVS"]),
                  num_steps=int(defaults["NUM_STEPS"]), total_timesteps=total,
                  num_minibatches=int(defaults["NUM_MINIBATCHES"]),
                  update_epochs=int(defaults["NUM_EPOCHS"]),
                  hidden_sizes=(int(defaults["HIDDEN_SIZE"]),) * int(defaults["NUM_LAYERS"]),
                  activation="relu", layer_norm=True,
                  reward_scale=float(defaults.get("REW_SCALE", 1.0)),
                  anneal_lr=bool(defaults.get("LR_LINEAR_DECAY", False)), eval_every=0)
    decay = float(defaults["EPS_DECAY"]) * float(defaults["TOTAL_TIMESTEPS_DECAY"]) / total
    hparams = dict(lr=float(defaults["LR"]), gamma=float(defaults["GAMMA"]),
                   lambda_=float(defaults["LAMBDA"]),
                   max_grad_norm=float(defaults["MAX_GRAD_NORM"]),
                   epsilon_start=float(defaults["EPS_START"]),
                   epsilon_end=float(defaults["EPS_FINISH"]), epsilon_fraction=min(1.0, decay))
    return fields, hparams


def pqn_race(args: Any, rivals: Rivals, repeats: int) -> dict:
    """The PQN engine against purejaxql's ``pqn_gymnax.py`` on its CartPole settings (one seed;
    its evaluation during training off, as the engine's)."""
    defaults = dict(rivals.pqn_defaults)
    fields, hparams = pqn_fields(defaults)
    config = dict(defaults, TOTAL_TIMESTEPS=fields["total_timesteps"],
                  TOTAL_TIMESTEPS_DECAY=int(float(defaults["TOTAL_TIMESTEPS_DECAY"])),
                  WANDB_MODE="disabled", TEST_DURING_TRAINING=False)
    train = rivals.pqn.make_train(config)  # fills NUM_UPDATES
    steps = int(config["NUM_UPDATES"]) * fields["num_envs"] * fields["num_steps"]
    cases = [engine_case("jaxcredit pqn", current, fields, hparams),
             compile_case(rivals.pqn_label, train, lambda s: (jax.random.PRNGKey(100 + s),),
                          steps)]
    name = (f"PQN {fields['env']}, {fields['num_envs']} envs × {fields['num_steps']} steps, "
            f"{fields['total_timesteps']:,} steps")
    return pair_race(name, cases, repeats, args.seed)


def rnn_fields(defaults: dict) -> dict:
    """PureJaxRL's ``ppo_rnn.py`` defaults as TrainConfig fields: its ``ActorCriticRNN`` is a
    128-unit ReLU embedding, a 128-unit GRU and 128-unit ReLU heads (``--policy gru``,
    ``hidden_sizes=(128, 128)``)."""
    return dict(algo="ppo", env=defaults["ENV_NAME"], num_envs=int(defaults["NUM_ENVS"]),
                num_steps=int(defaults["NUM_STEPS"]),
                total_timesteps=int(defaults["TOTAL_TIMESTEPS"]),
                update_epochs=int(defaults["UPDATE_EPOCHS"]),
                num_minibatches=int(defaults["NUM_MINIBATCHES"]), policy="gru",
                hidden_sizes=(128, 128), activation="relu",
                anneal_lr=bool(defaults["ANNEAL_LR"]), eval_every=0)


def rnn_race(args: Any, rivals: Rivals, repeats: int) -> dict:
    """Recurrent PPO against PureJaxRL's ``ppo_rnn.py`` on its own defaults (one seed)."""
    defaults = dict(rivals.rnn_defaults)
    if args.rnn_timesteps:
        defaults["TOTAL_TIMESTEPS"] = int(args.rnn_timesteps)
    fields = rnn_fields(defaults)
    hparams = dict(lr=defaults["LR"], gamma=defaults["GAMMA"], lambda_=defaults["GAE_LAMBDA"],
                   clip_eps=defaults["CLIP_EPS"], ent_coef=defaults["ENT_COEF"],
                   vf_coef=defaults["VF_COEF"], max_grad_norm=defaults["MAX_GRAD_NORM"])
    cases = [engine_case("jaxcredit --policy gru", current, fields, hparams),
             purejaxrl_case(f"{rivals.ppo_label} ppo_rnn", rivals.rnn, defaults, hparams,
                            fields["num_envs"], fields["total_timesteps"])]
    name = (f"recurrent PPO+GAE {fields['env']}, {fields['num_envs']} envs, GRU 128, "
            f"{fields['total_timesteps']:,} steps")
    return pair_race(name, cases, repeats, args.seed)


def continuous_size(args: Any, defaults: dict) -> tuple[int, int]:
    """``(num_envs, total_timesteps)`` of the continuous race: the flags, or by default
    ``ppo_continuous_action.py``'s own on an accelerator and :data:`CONTINUOUS_CPU_SIZE` on CPU."""
    own = (int(defaults["NUM_ENVS"]), int(defaults["TOTAL_TIMESTEPS"]))
    default = CONTINUOUS_CPU_SIZE if jax.default_backend() == "cpu" else own
    return (int(args.continuous_envs or default[0]),
            int(args.continuous_timesteps or default[1]))


def continuous_fields(defaults: dict) -> tuple[dict, dict]:
    """``ppo_continuous_action.py``'s settings (``defaults``, its ENV_NAME, NUM_ENVS and
    TOTAL_TIMESTEPS those of the race) as the engine's ``(TrainConfig fields, Hparams)``: its
    ``ActorCritic`` is two separate 256-256 towers with a state-independent log σ
    (``--action-dist gaussian``, ``hidden_sizes=(256, 256)``)."""
    fields = dict(algo="ppo", env=defaults["ENV_NAME"], num_envs=int(defaults["NUM_ENVS"]),
                  num_steps=int(defaults["NUM_STEPS"]),
                  total_timesteps=int(defaults["TOTAL_TIMESTEPS"]),
                  update_epochs=int(defaults["UPDATE_EPOCHS"]),
                  num_minibatches=int(defaults["NUM_MINIBATCHES"]), action_dist="gaussian",
                  normalize_env=bool(defaults["NORMALIZE_ENV"]), hidden_sizes=(256, 256),
                  activation=defaults["ACTIVATION"], anneal_lr=bool(defaults["ANNEAL_LR"]),
                  eval_every=0)
    hparams = dict(lr=defaults["LR"], gamma=defaults["GAMMA"], lambda_=defaults["GAE_LAMBDA"],
                   clip_eps=defaults["CLIP_EPS"], ent_coef=defaults["ENT_COEF"],
                   vf_coef=defaults["VF_COEF"], max_grad_norm=defaults["MAX_GRAD_NORM"])
    return fields, hparams


def late_return(returns: Any, ended: Any) -> float:
    """The mean return of the episodes that ended in the last tenth of a run's updates, or
    if none did, in the last update where any did (``returns`` and ``ended``, a count or a flag
    per return, have the updates on their leading axis; NaN if no episode ended)."""
    returns = np.asarray(returns, np.float64)
    ended = np.broadcast_to(np.asarray(ended, np.float64), returns.shape)
    per_update = ended.reshape(len(ended), -1).sum(1)
    if not per_update.any():
        return float("nan")
    updates = len(per_update)
    start = min(updates - max(1, updates // 10), int(np.flatnonzero(per_update)[-1]))
    returns, ended = returns[start:], ended[start:]
    return float(np.where(ended > 0, returns * ended, 0.0).sum() / ended.sum())


def continuous_race(args: Any, rivals: Rivals, repeats: int) -> dict:
    """Continuous PPO (``--action-dist gaussian``, running normalisation) against PureJaxRL's
    ``ppo_continuous_action.py`` on ``--continuous-env``, both stepping the same unit-box task
    (``purejaxrl.continuous_task``), one seed; each row also scores every timed run by its
    final return (:func:`late_return`)."""
    num_envs, total = continuous_size(args, rivals.continuous_defaults)
    defaults = dict(rivals.continuous_defaults, ENV_NAME=args.continuous_env,
                    NUM_ENVS=num_envs, TOTAL_TIMESTEPS=total)
    fields, hparams = continuous_fields(defaults)
    task = purejaxrl_lib.continuous_task(args.continuous_env)
    cases = [engine_case("jaxcredit --action-dist gaussian", current, fields, hparams,
                         env=(task, task.default_params),
                         score=lambda out: late_return(out[1]["episode_return"],
                                                       out[1]["episodes"])),
             purejaxrl_case(f"{rivals.ppo_label} ppo_continuous_action", rivals.continuous,
                            defaults, hparams, num_envs, total,
                            score=lambda out: late_return(
                                out["metrics"]["returned_episode_returns"],
                                out["metrics"]["returned_episode"]))]
    width = "-".join(str(h) for h in fields["hidden_sizes"])
    name = (f"continuous PPO+GAE {fields['env']}, {num_envs} envs x {fields['num_steps']} steps, "
            f"{width} {fields['activation']}, {total:,} steps (PureJaxRL's own: "
            f"{int(rivals.continuous_defaults['NUM_ENVS'])} envs, "
            f"{int(rivals.continuous_defaults['TOTAL_TIMESTEPS']):,} steps)")
    result = pair_race(name, cases, repeats, args.seed)
    result["score"] = "mean return of the episodes that ended in the last tenth of each run"
    return result


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


def estimator_races(args: Any, specs: tuple[EstimatorSpec, ...], fit_steps: list[int],
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


def redistributor_fields(args: Any) -> dict:
    """PPO+GAE of the --redistributors race: PureJaxRL's PPO at that race's size and env."""
    num_envs, num_steps = args.redistributor_envs, args.redistributor_steps
    total = num_envs * num_steps * args.redistributor_updates
    return dict(ppo_fields(num_envs, total), env=args.redistributor_env, num_steps=num_steps,
                estimator="gae", eval_every=0)


def redistributor_races(args: Any, specs: tuple[EstimatorSpec, ...],
                        fit_steps: list[int], hparams: dict, repeats: int) -> list[dict]:
    """PPO with each redistributor against PPO+GAE, once per ``redistribute_fit_steps`` value."""
    learned = {s.label: make_redistributor(s.name, **dict(s.options)).learned for s in specs}
    title = (f"PPO {args.redistributor_env}, {args.redistributor_envs} envs x "
             f"{args.redistributor_steps} steps, {args.redistributor_updates} updates")
    return stage_races(title, redistributor_fields(args), "redistribute", specs, learned,
                       fit_steps, hparams, repeats, args.seed)
