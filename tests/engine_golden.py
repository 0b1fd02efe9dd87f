"""Golden metrics of the training engine: what it computes today, pinned bit for bit on CPU.

Each entry of :data:`CONFIGS` is a tiny configuration (2-8 environments, a few steps, 2-3
updates) chosen so that together they run every stage kind of the engine
(``jaxcredit.agents.train``, ``dqn``, ``pqn``, ``runs``, ``sweep``, ``host_loop``'s chunks):
fitted and exact (oracle) credit models, the ``1-step`` learner, burn-in, model warm-up,
pretrain-then-freeze, every registered redistributor, HER relabelling on DQN, the group
estimators, recurrent and RMA policies, PQN, a Gaussian policy, the λ/γ meta-gradient,
evaluation with the exact-model diagnostics, a run in chunks over a population of seeds, and a
sweep sharded over two (forced host) devices. :func:`run` trains one of them — init and the
whole run as ONE program compiled by ``conftest.bitwise_jit`` (the suite's bitwise level) —
and returns every metric of every update. ``tests/test_engine_golden.py`` checks that the
numbers equal the goldens recorded for the running jaxlib.

Goldens live in ``tests/goldens/engine_jaxlib-<version>.json``, one file per jaxlib version
(XLA's code generation, hence float rounding, changes between versions), recorded with::

    python tests/engine_golden.py --record [NAME ...]     # all configs, or only those named
    python -m tests.engine_golden --record [NAME ...]     # the same, from the repository root

which runs the configs under the suite's XLA flags (``conftest.TEST_XLA_FLAGS``) and merges the
results into the running jaxlib's file. ``--list`` names the configs and what each covers;
``--print NAME`` prints one config's metrics as JSON (the sharded sweep runs that way, in a
subprocess with two host devices).

XLA:CPU compiles for the host's vector instruction set, and a reduction vectorised over 8
lanes (AVX2) rounds differently from one over 16 (AVX-512): each file records the CPU features
it was recorded on (:func:`machine`), and the test skips, saying so, on a CPU whose features
differ.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import time
from typing import Any, Callable, Optional

_TESTS = pathlib.Path(__file__).resolve().parent
if str(_TESTS) not in sys.path:  # `python -m tests.engine_golden`: conftest is a top-level module
    sys.path.insert(0, str(_TESTS))

# conftest sets the suite's XLA flags (TEST_XLA_FLAGS) before jax starts: the goldens are
# recorded under the flags the test runs under.
import conftest  # noqa: E402
from conftest import bitwise_jit, init_and_train  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxcredit.agents import Hparams, TrainConfig, make_engine  # noqa: E402
from jaxcredit.presets import PQN_HPARAMS, learner_fields  # noqa: E402

GOLDENS = _TESTS / "goldens"
# The sharded sweep runs in a subprocess with this many host devices (``--print``).
SHARDED_DEVICES = 2
_RESULT = "GOLDEN-RESULT "


# ---------------------------------------------------------------------------------------------
# The configurations
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """One golden configuration.

    Either ``fields`` (``TrainConfig`` fields by their flat names) with ``hparams``
    (``Hparams.create`` values): one run from ``jax.random.key(seed)``, init and train in one
    program; or ``argv``, a ``jaxcredit train`` / ``jaxcredit sweep`` command line parsed by the
    CLI (``cli.parse_command``, ``train_flags.build_config``): its population (settings ×
    seeds, ``sweep.make_population``) run in the host loop's chunks (``chunk_lengths``), all in
    one program, its members split over ``devices`` devices.

    Attributes:
      covers: the stage kinds this configuration runs (documentation; ``--list``).
    """

    covers: tuple[str, ...]
    fields: Optional[dict] = None
    hparams: Optional[dict] = None
    argv: Optional[tuple[str, ...]] = None
    seed: int = 0
    devices: int = 1

    def build(self) -> tuple[TrainConfig, Any]:
        """``(config, hparams)``: the resolved config, and ``Hparams`` (one run) or the CLI's
        population (``sweep.Population``)."""
        if self.argv is None:
            return (TrainConfig.from_flat(**self.fields).resolved(),
                    Hparams.create(**(self.hparams or {})))
        from jaxcredit import cli  # noqa: PLC0415
        from jaxcredit.agents import sweep  # noqa: PLC0415
        from jaxcredit.train_flags import base_hparams, build_config, sweep_settings  # noqa

        args = cli.parse_command(list(self.argv))
        settings = (sweep_settings(args)[0] if self.argv[0] == "sweep"
                    else [base_hparams(args)])
        return build_config(args), sweep.make_population(settings, args.num_seeds, args.seed)

    @property
    def num_chunks(self) -> int:
        from jaxcredit import cli  # noqa: PLC0415

        return cli.parse_command(list(self.argv)).num_chunks


# Shared pieces (the smallest sizes that still run every stage).
TINY = dict(hidden_sizes=(8,), num_minibatches=1, update_epochs=1, eval_every=0,
            eval_episodes=2)
KEY_TO_DOOR = dict(env="KeyToDoor", env_options=(("length", 6),), num_envs=4, num_steps=6,
                   total_timesteps=4 * 6 * 3)
DELAYED_KEY_TO_DOOR = dict(KEY_TO_DOOR, env="DelayedReward-KeyToDoor",
                           total_timesteps=4 * 6 * 2)
DELAYED_EFFECT = dict(env="DelayedEffect", env_options=(("n", 3),), num_envs=4, num_steps=4,
                      total_timesteps=4 * 4 * 3)
COMMAND_CHAIN = dict(env="CommandChain", group_size=2, num_envs=4, num_steps=4,
                     total_timesteps=4 * 4 * 3, env_options=(
                         ("horizon", 4), ("num_commands", 4), ("num_instances", 2),
                         ("solution_length", 2)))
SMALL_HCA = (("hidden", (8,)),)


def _learner(label: str, **fields) -> dict:
    return {**TINY, **learner_fields(label, **fields)}


CONFIGS: dict[str, Case] = {
    # --- credit models: fitted, exact, 1-step; the schedules around them --------------------------
    "hca_return_fitted": Case(
        ("fitted learned estimator (hca_return)", "evaluation with the exact twin: credit "
         "errors, KL to the exact hindsight, exact return"),
        _learner("hca_return", **DELAYED_EFFECT, estimator_options=SMALL_HCA, eval_every=3),
        dict(gamma=1.0)),
    "hca_return_oracle": Case(
        ("oracle: the exact return hindsight of the current policy (model=oracle)",
         "evaluation: exact return on Shortcut"),
        _learner("hca_return oracle", env="Shortcut", env_options=(("n", 4),), num_envs=4,
                 num_steps=4, total_timesteps=4 * 4 * 3, eval_every=3),
        dict(gamma=1.0)),
    "hca_return_1step_warmup": Case(
        ("the 1-step learner (one Adam step per update at the agent's rate)",
         "model warm-up (model_warmup_updates)"),
        _learner("hca_return 1-step", **DELAYED_EFFECT, estimator_options=SMALL_HCA,
                 model_warmup_updates=1),
        dict(gamma=1.0, lr=1e-3, estimator_lr=1e-3)),
    "cocoa_feature_burnin_pretrain": Case(
        ("burn-in (burn_in_updates)", "pretrain-then-freeze (estimator_pretrain_steps, "
         "features=pretrain)", "contribution estimator (cocoa_feature)"),
        _learner("cocoa_feature", **KEY_TO_DOOR, burn_in_updates=1, estimator_pretrain_steps=3,
                 estimator_options=(("features", "pretrain"), ("hidden", 8),
                                    ("num_features", 8))),
        dict(gamma=1.0, estimator_lr=1e-2)),
    "cca_gru": Case(
        ("counterfactual credit assignment (cca, agent_state=gru)",),
        _learner("cca gru", **KEY_TO_DOOR,
                 estimator_options=(("hidden", (8,)), ("stat_size", 4))),
        dict(gamma=1.0)),
    # --- every registered redistributor -----------------------------------------------------------
    "rudder": Case(
        ("redistributor rudder (fitted LSTM)", "evaluation: redistribution quality against "
         "the undelayed ground truth"),
        {**TINY, **DELAYED_KEY_TO_DOOR, "algo": "a2c", "redistribute": "rudder",
         "eval_every": 2, "redistribute_options": (("batch_episodes", 4), ("features", 8),
                                                    ("lessons", 8))},
        dict(gamma=1.0)),
    "rrd": Case(
        ("redistributor rrd (randomized return decomposition)",),
        {**TINY, **DELAYED_KEY_TO_DOOR, "algo": "ppo", "redistribute": "rrd",
         "redistribute_options": (("batch_size", 8), ("hidden", (8,)), ("lessons", 8),
                                  ("sample_size", 4))},
        dict(gamma=1.0)),
    "ircr": Case(
        ("redistributor ircr",),
        {**TINY, **DELAYED_KEY_TO_DOOR, "algo": "ppo", "redistribute": "ircr",
         "redistribute_options": (("batch_size", 8), ("best", 2), ("hidden", (8,)),
                                  ("lessons", 8))},
        dict(gamma=1.0)),
    "synthetic_returns": Case(
        ("redistributor synthetic_returns",),
        {**TINY, **DELAYED_KEY_TO_DOOR, "algo": "a2c", "redistribute": "synthetic_returns",
         "redistribute_options": (("capacity", 8), ("embedding_layers", (8,)),
                                  ("hidden_layers", (8,)), ("memory_size", 8))},
        dict(gamma=1.0)),
    "prm": Case(
        ("redistributor prm (process reward model, pretrained scorer)",),
        {**TINY, "algo": "ppo", "env": "ArithmeticChain", "env_options": (("steps", 3),),
         "num_envs": 4, "num_steps": 3, "total_timesteps": 4 * 3 * 2, "redistribute": "prm",
         "redistribute_options": (("hidden", (8,)), ("pretrain_batch", 8),
                                  ("pretrain_problems", 16), ("pretrain_steps", 3))},
        dict(gamma=1.0)),
    "tvt_rma": Case(
        ("redistributor tvt", "RMA policy (reconstructive memory agent)"),
        {**TINY, **DELAYED_KEY_TO_DOOR, "algo": "a2c", "policy": "rma", "redistribute": "tvt",
         "redistribute_options": (("no_transport_period", 1), ("threshold", 0.0))},
        dict(gamma=1.0)),
    # --- off-policy engines -----------------------------------------------------------------------
    "dqn_her_bitflip": Case(
        ("DQN (double_q, 2-step targets, replay, target updates)",
         "HER relabelling (strategy=episode)", "DQN evaluation with success rates"),
        {**TINY, "algo": "dqn", "env": "BitFlip", "env_options": (("n", 3),), "relabel": "her",
         "relabel_options": (("k", 4), ("strategy", "episode")), "n_step": 2, "num_envs": 4,
         "num_steps": 3, "total_timesteps": 4 * 3 * 3, "buffer_size": 240, "batch_size": 8,
         "learning_starts": 0, "gradient_steps": 2, "target_update_every": 2,
         "eval_every": 3}, dict(lr=1e-3)),
    "pqn_cartpole": Case(
        ("PQN (Q(λ) without replay, LayerNorm Q-network)",),
        {**learner_fields("PQN", env="CartPole-v1"), **{k: TINY[k] for k in (
            "hidden_sizes", "update_epochs", "eval_every")}, "num_envs": 4, "num_steps": 4,
         "num_minibatches": 2, "total_timesteps": 4 * 4 * 3},
        PQN_HPARAMS),
    # --- group estimators -------------------------------------------------------------------------
    "grpo": Case(("group estimator grpo (PPO+GRPO)",), _learner("PPO+GRPO", **COMMAND_CHAIN),
                 dict(gamma=1.0)),
    "rloo": Case(("group estimator rloo (PPO+RLOO)",), _learner("PPO+RLOO", **COMMAND_CHAIN),
                 dict(gamma=1.0)),
    "dr_grpo": Case(("group estimator dr_grpo (PPO+Dr.GRPO)",),
                    _learner("PPO+Dr.GRPO", **COMMAND_CHAIN), dict(gamma=1.0)),
    # --- policies and the meta-gradient -----------------------------------------------------------
    "ppo_gaussian_pendulum": Case(
        ("continuous actions: gaussian policy on Pendulum-v1", "running observation and reward "
         "normalisation (on by default for continuous actions)", "continuous evaluation"),
        {**TINY, "algo": "ppo", "env": "Pendulum-v1",
         "env_options": (("max_steps_in_episode", 8),), "action_dist": "gaussian",
         "num_envs": 2, "num_steps": 8, "num_minibatches": 2, "total_timesteps": 2 * 8 * 2,
         "eval_every": 2, "eval_episodes": 1}, {}),
    "a2c_meta_gradient": Case(
        ("λ and γ meta-gradient (meta_gradient=lambda,gamma)",),
        {**TINY, "algo": "a2c", **DELAYED_EFFECT, "meta_gradient": ("lambda", "gamma")},
        dict(gamma=0.9, lambda_=0.5, meta_lr=0.05)),
    # --- the command line: recurrent policy, chunks, populations, a sharded sweep -----------------
    "ppo_gru_cli": Case(
        ("recurrent policy (gru): PPO on whole sequences, from the command line "
         "(tests/conftest.train_gru_from_cli's flags, in one chunk)",),
        argv=("train", "--env", "TMaze", "--env-option", "corridor_length=3", "--policy", "gru",
              "--num-envs", "2", "--num-steps", "8", "--num-minibatches", "2",
              "--total-timesteps", "32", "--hidden-sizes", "8", "8", "--eval-every", "0",
              "--num-chunks", "1")),
    "a2c_chunked_seeds_cli": Case(
        ("a run in chunks (num_chunks=2: 5 updates as chunks of 2 and 3, the last one ending "
         "in a partial evaluation block)", "a population of 2 seeds (vmapped)",
         "A2C on CartPole with evaluation blocks"),
        argv=("train", "--algo", "a2c", "--env", "CartPole-v1", "--num-envs", "2",
              "--num-steps", "8", "--total-timesteps", "80", "--hidden-sizes", "8",
              "--eval-every", "2", "--eval-episodes", "2", "--num-chunks", "2",
              "--num-seeds", "2")),
    "a2c_sweep_sharded_cli": Case(
        ("sharded sweep: 2 settings × 2 seeds over 2 host devices (a subprocess)",),
        argv=("sweep", "--algo", "a2c", "--env", "CartPole-v1", "--num-envs", "2",
              "--num-steps", "8", "--total-timesteps", "32", "--hidden-sizes", "8",
              "--eval-every", "0", "--grid", "lr=1e-3,3e-3", "--num-seeds", "2",
              "--num-chunks", "1"),
        devices=SHARDED_DEVICES),
}


# ---------------------------------------------------------------------------------------------
# Running a configuration
# ---------------------------------------------------------------------------------------------


def run(name: str) -> dict[str, np.ndarray]:
    """Every metric of every update of ``CONFIGS[name]``: ``{metric: array [updates]}`` as the
    engine returns them (float32, int32, ...); a population's metrics per member
    (``member<p>/<metric>``). One program, compiled by ``conftest.bitwise_jit``. A config with
    more ``devices`` than this process has runs in a subprocess with that many host devices."""
    case = CONFIGS[name]
    if case.devices > len(jax.devices()):
        return _run_in_subprocess(name, case.devices)
    compiled, args, unpack = program(name)
    return unpack(jax.device_get(compiled(*args)))


def program(name: str) -> tuple[Callable, tuple, Callable]:
    """``(jitted, args, unpack)`` of ``CONFIGS[name]``: ``unpack(jitted(*args))`` is
    :func:`run`'s result (``jitted.lower(*args)`` traces the program without compiling it)."""
    case = CONFIGS[name]
    config, hparams = case.build()
    engine = make_engine(config)
    if case.argv is None:
        def unpack(outputs):
            _, (_, metrics) = outputs
            return {k: np.asarray(v) for k, v in metrics.items()}

        return (bitwise_jit(init_and_train, static_argnums=0),
                (engine, jax.random.key(case.seed), hparams), unpack)
    return _population_program(engine, config, hparams, case)


def _population_program(engine, config: TrainConfig, population, case: Case):
    """The host loop's run of a population (``host_loop._run_experiment``): init, then the
    chunks of ``chunk_lengths``, each ``engine.run`` vmapped over members; here all in one
    program whose inputs and outputs are split over the mesh of ``case.devices`` devices."""
    from jaxcredit.agents import sweep  # noqa: PLC0415
    from jaxcredit.agents.host_loop import chunk_lengths  # noqa: PLC0415

    lengths = chunk_lengths(config.num_updates, case.num_chunks, config.evaluation.every)
    mesh = sweep.sweep_mesh(jax.devices()[:case.devices])
    sharding = sweep.member_sharding(mesh)

    def chunks(keys, hparams):
        state = jax.vmap(engine.init)(keys)
        parts = []
        for length in lengths:
            state, metrics = jax.vmap(lambda s, h, n=length: engine.run(s, h, n))(state,
                                                                                   hparams)
            parts.append(metrics)
        return jax.tree.map(lambda *xs: jax.numpy.concatenate(xs, axis=1), *parts)

    def unpack(metrics):
        return {f"member{p}/{k}": np.asarray(v[p]) for k, v in sorted(metrics.items())
                for p in range(population.size)}

    return (bitwise_jit(chunks, in_shardings=(sharding, sharding), out_shardings=sharding),
            sweep.shard((population.keys, population.hparams), mesh), unpack)


def _run_in_subprocess(name: str, devices: int) -> dict:
    """``run(name)`` in a fresh process with ``devices`` forced host devices (the suite's XLA
    flags and this process's environment otherwise)."""
    flags = os.environ.get("XLA_FLAGS", "")
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"{flags} --xla_force_host_platform_device_count={devices}".strip())
    proc = subprocess.run([sys.executable, str(pathlib.Path(__file__).resolve()), "--print",
                           name], capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: the subprocess with {devices} devices failed:\n"
                           f"{proc.stderr[-3000:]}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith(_RESULT))
    return decode(json.loads(line[len(_RESULT):]))


# ---------------------------------------------------------------------------------------------
# Golden files, exact comparison
# ---------------------------------------------------------------------------------------------


def encode(metrics: dict[str, np.ndarray]) -> dict:
    """JSON form: ``{metric: {"dtype": ..., "values": [...]}}``. ``tolist`` of a float32 array
    gives Python floats equal to the float32 values, and JSON writes them at full precision
    (shortest repr that reads back the same double; NaN as ``NaN``, -0.0 as ``-0.0``)."""
    return {k: {"dtype": str(v.dtype), "values": v.tolist()} for k, v in sorted(metrics.items())}


def decode(columns: dict) -> dict[str, np.ndarray]:
    return {k: np.asarray(c["values"], dtype=c["dtype"]) for k, c in columns.items()}


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: equal values with equal signs (0.0 is not -0.0), NaN equal to NaN."""
    if a.dtype.kind != "f":
        return a == b
    return (a == b) & (np.signbit(a) == np.signbit(b)) | (np.isnan(a) & np.isnan(b))


def first_difference(golden: dict[str, np.ndarray], actual: dict[str, np.ndarray]
                     ) -> Optional[str]:
    """None when every metric of every update is bit for bit the golden's; else a message that
    names the metrics missing or new, or the first update (0-based) at which a value differs and
    the metrics that differ there (the first in name order with its values)."""
    missing, extra = sorted(set(golden) - set(actual)), sorted(set(actual) - set(golden))
    if missing or extra:
        return f"metrics differ: missing {missing}, new {extra}"
    first: dict[str, int] = {}
    for name in sorted(golden):
        want, got = golden[name], actual[name]
        if want.dtype != got.dtype or want.shape != got.shape:
            return (f"{name}: dtype/shape {got.dtype}{list(got.shape)}, golden "
                    f"{want.dtype}{list(want.shape)}")
        same = _same(want, got)
        if not same.all():
            first[name] = int(np.argwhere(~same)[0][-1])  # metrics are [updates]
    if not first:
        return None
    update = min(first.values())
    names = [name for name, at in first.items() if at == update]
    name = names[0]
    got, want = actual[name].tolist(), golden[name].tolist()
    return (f"first difference at update {update} (0-based), in {len(names)} metric(s) "
            f"{names}; {name}: got {got[update]!r}, golden {want[update]!r} (all updates: "
            f"got {got}, golden {want}); {len(first)} of {len(golden)} metrics differ somewhere")


def jaxlib_version() -> str:
    from importlib.metadata import version  # noqa: PLC0415

    return version("jaxlib")


def golden_path(jaxlib: Optional[str] = None) -> pathlib.Path:
    return GOLDENS / f"engine_jaxlib-{jaxlib or jaxlib_version()}.json"


# CPU features that change the code XLA:CPU generates (vector widths, FMA, matrix units).
_ISA = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl",
        "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16",
        "asimd", "sve", "sve2")


def machine() -> dict:
    """What the goldens depend on besides jaxlib: the architecture and its vector features."""
    features: list[str] = []
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                present = set(line.split(":", 1)[1].split())
                features = [f for f in _ISA if f in present]
                break
    except OSError:
        pass
    return {"arch": platform.machine(), "isa": features}


def recorded_under() -> dict:
    """What a golden file must have been recorded under, besides its jaxlib, to hold here: the
    jax version, the backend (the goldens are XLA:CPU's), the CPU (:func:`machine`) and the
    suite's XLA flags."""
    from importlib.metadata import version  # noqa: PLC0415

    return {"jax": version("jax"), "backend": jax.default_backend(), "machine": machine(),
            "xla_flags": " ".join(conftest.TEST_XLA_FLAGS)}


def load(jaxlib: Optional[str] = None) -> Optional[dict]:
    path = golden_path(jaxlib)
    return json.loads(path.read_text()) if path.exists() else None


def record(names: list[str]) -> pathlib.Path:
    """Runs ``names`` and merges their metrics into the running jaxlib's golden file."""
    path = golden_path()
    data = load() or {"configs": {}}
    before = {k: data.get(k, v) for k, v in recorded_under().items()}
    if before != recorded_under():
        print(f"note: {path.name} was recorded under {before}, this run is under "
              f"{recorded_under()}: the configs not recorded now may not reproduce here; "
              f"record them all", file=sys.stderr)
    data = dict(jaxlib=jaxlib_version(), numpy=np.__version__,
                python=platform.python_version(), **recorded_under(),
                recorded_with="python tests/engine_golden.py --record [NAME ...]",
                configs=data["configs"])
    for name in names:
        start = time.perf_counter()
        metrics = run(name)
        seconds = time.perf_counter() - start
        data["configs"][name] = {"seconds": round(seconds, 2), "metrics": encode(metrics)}
        print(f"{name}: {len(metrics)} metrics, {seconds:.1f} s", flush=True)
        GOLDENS.mkdir(exist_ok=True)
        data["configs"] = dict(sorted(data["configs"].items()))
        path.write_text(dumps(data))
    return path


def dumps(data: dict) -> str:
    """The golden file's text: indented JSON with each list (a metric's values) on one line."""
    text = json.dumps(data, indent=1)
    return re.sub(r"\[\s*([^\[\]{}]*?)\s*\]",
                  lambda m: "[" + ", ".join(v.strip() for v in m.group(1).split(",")) + "]",
                  text) + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--list"]:
        for name, case in CONFIGS.items():
            print(f"{name}: {'; '.join(case.covers)}")
        return 0
    if argv[:1] == ["--print"] and len(argv) == 2:
        print(_RESULT + json.dumps(encode(run(argv[1]))), flush=True)
        return 0
    if argv[:1] == ["--record"]:
        names = argv[1:] or list(CONFIGS)
        unknown = [n for n in names if n not in CONFIGS]
        if unknown:
            print(f"unknown config(s) {unknown}; known: {list(CONFIGS)}", file=sys.stderr)
            return 2
        print(f"recorded into {record(names)}")
        return 0
    print("usage: python tests/engine_golden.py --record [NAME ...] | --list | --print NAME",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
