"""Training throughput: the engine's PPO on CartPole-v1 beside PureJaxRL's, in one process.

    jaxcredit bench train [--quick] [--purejaxrl-git DIR] [--json results.json]
    python -m jaxcredit.bench train ...

The setup is PureJaxRL's default PPO: 4 envs × 128 steps, 4 epochs × 4 minibatches, 2 × 64 tanh
MLPs, lr 2.5e-4 annealed, 5e5 env steps, one seed. For each case the whole training run is one
jitted function; the timing protocol is:

* ``compile_s``: ahead-of-time ``jax.jit(f).lower(...)`` plus ``.compile()``, timed separately;
* ``sps``: env steps per call / median wall time of ``--repeats`` calls of the compiled function,
  each ended by ``jax.block_until_ready``, with fresh seeds; the two implementations alternate
  call by call so that machine load hits both alike.

PureJaxRL's code is not part of this project. With ``--purejaxrl-git`` (a bare git directory of
luchris429/purejaxrl; default ``$PUREJAXRL_GIT``), ``purejaxrl/ppo.py`` and ``wrappers.py`` are
extracted into a temporary folder, patched for API drift by ``purejaxrl_patch.py`` (optional
brax/navix imports; gymnax 1.0's six-value step wrapped back to five values), imported and timed
with its own upstream defaults. Without a snapshot the published reference on a 2-core CPU is
printed instead (152,595 env steps/s, compile 4.2 s).

Extra cases: the engine at 2048 envs, and ``jax.vmap`` over 16 seeds at 4 envs (aggregate SPS).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import jax

from jaxcredit.agents import Hparams, TrainConfig, make_train

PUREJAXRL_REFERENCE = {"sps": 152595, "compile_s": 4.2,
                       "source": "2-core CPU, jax 0.10.2 (docs/engine.md)"}


def _find_patch_script() -> pathlib.Path | None:
    here = pathlib.Path(__file__).resolve()
    for parent in here.parents:
        for candidate in (parent / "shared" / "bench" / "purejaxrl" / "purejaxrl_patch.py",
                          parent.parent / "shared" / "bench" / "purejaxrl" / "purejaxrl_patch.py"):
            if candidate.exists():
                return candidate
    return None


def load_purejaxrl(git_dir: str, patch_script: pathlib.Path, workdir: pathlib.Path):
    """Extracts, patches and imports PureJaxRL's ``ppo`` module from a bare git snapshot."""
    for name in ("ppo.py", "wrappers.py"):
        text = subprocess.run(["git", "--git-dir", git_dir, "show", f"HEAD:purejaxrl/{name}"],
                              check=True, capture_output=True, text=True).stdout
        (workdir / name).write_text(text)
    subprocess.run([sys.executable, str(patch_script), str(workdir)], check=True,
                   capture_output=True)
    sys.path.insert(0, str(workdir))
    try:
        for name in ("ppo", "wrappers"):
            sys.modules.pop(name, None)
        ppo = importlib.import_module("ppo")
    finally:
        sys.path.remove(str(workdir))
    tree = ast.parse((workdir / "ppo.py").read_text())
    config = next(ast.literal_eval(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                  and any(getattr(t, "id", None) == "config" for t in node.targets))
    return ppo, config


class Case:
    """One compiled training function, its example arguments and its env steps per call."""

    def __init__(self, label: str, fn: Callable, make_args: Callable[[int], tuple], steps: int):
        self.label, self.make_args, self.steps = label, make_args, steps
        start = time.perf_counter()
        lowered = jax.jit(fn).lower(*make_args(0))
        self.compiled = lowered.compile()
        self.compile_s = time.perf_counter() - start
        self.times: list[float] = []
        self.out: Any = None

    def call(self, seed: int) -> None:
        args = self.make_args(seed)
        jax.block_until_ready(args)
        start = time.perf_counter()
        self.out = jax.block_until_ready(self.compiled(*args))
        self.times.append(time.perf_counter() - start)

    def result(self) -> dict:
        run_s = statistics.median(self.times)
        return {"label": self.label, "sps": round(self.steps / run_s),
                "compile_s": round(self.compile_s, 2), "run_s_median": round(run_s, 3),
                "run_s_all": [round(t, 3) for t in self.times], "env_steps_per_call": self.steps}


def engine_case(label: str, num_envs: int, total_timesteps: int, seeds: int = 1,
                **config_fields: Any) -> Case:
    config = TrainConfig(num_envs=num_envs, total_timesteps=total_timesteps,
                         **config_fields).resolved()
    train = make_train(config)
    hparams = Hparams.create()
    steps = config.num_updates * config.steps_per_update * seeds
    if seeds == 1:
        return Case(label, train, lambda s: (jax.random.key(100 + s), hparams), steps)
    batched = jax.tree.map(lambda x: jax.numpy.broadcast_to(x, (seeds,)), hparams)
    return Case(label, jax.vmap(train),
                lambda s: (jax.random.split(jax.random.key(100 + s), seeds), batched), steps)


def purejaxrl_case(label: str, ppo: Any, base: dict, num_envs: int | None = None,
                   total_timesteps: float | None = None, seeds: int = 1) -> Case:
    config = dict(base, DEBUG=False)
    if num_envs:
        config["NUM_ENVS"] = num_envs
    if total_timesteps:
        config["TOTAL_TIMESTEPS"] = total_timesteps
    train = ppo.make_train(config)  # fills NUM_UPDATES
    steps = int(config["NUM_UPDATES"]) * config["NUM_STEPS"] * config["NUM_ENVS"] * seeds
    if seeds == 1:
        return Case(label, train, lambda s: (jax.random.PRNGKey(100 + s),), steps)
    return Case(label, jax.vmap(train),
                lambda s: (jax.random.split(jax.random.PRNGKey(100 + s), seeds),), steps)


def _print(result: dict) -> None:
    print(f"{result['label']} sps={result['sps']} compile_s={result['compile_s']:.1f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jaxcredit bench train", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="only the default case, 2 repeats, no extra cases")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--purejaxrl-git", default=os.environ.get("PUREJAXRL_GIT"),
                        help="bare git dir of luchris429/purejaxrl (default: $PUREJAXRL_GIT)")
    parser.add_argument("--patch-script", default=None,
                        help="purejaxrl_patch.py (default: shared/bench/purejaxrl/ near the repo)")
    parser.add_argument("--big-envs", type=int, default=2048)
    parser.add_argument("--big-updates", type=int, default=4,
                        help="updates per call in the many-envs case")
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--seeds-timesteps", type=float, default=1e5,
                        help="env steps per seed in the vmapped-seeds case")
    parser.add_argument("--compare-all", action="store_true",
                        help="also time PureJaxRL in the many-envs and many-seeds cases")
    parser.add_argument("--estimators", default=None,
                        help="also race A2C with each of these estimators (comma-separated, e.g. "
                             "hca_return,c2a2c) against A2C+GAE at the same size and print each "
                             "one's time per env step relative to GAE's")
    parser.add_argument("--estimator-env", default="CartPole-v1",
                        help="environment of the --estimators race")
    parser.add_argument("--json", default=None, help="write all results to this JSON file")
    args = parser.parse_args(argv)
    repeats = 2 if args.quick else args.repeats
    estimator_names = []
    if args.estimators:
        from jaxcredit.estimators import registered  # noqa: PLC0415

        estimator_names = ["gae"] + [n for n in args.estimators.split(",") if n and n != "gae"]
        unknown = [n for n in estimator_names if n not in registered()]
        if unknown:
            print(f"jaxcredit bench train: unknown estimator(s) {', '.join(unknown)}; known: "
                  f"{', '.join(registered())}", file=sys.stderr)
            return 2
    print(f"backend={jax.default_backend()} devices={len(jax.devices())} jax={jax.__version__}",
          flush=True)

    ppo = base = None
    tmp = None
    if args.purejaxrl_git:
        patch = pathlib.Path(args.patch_script) if args.patch_script else _find_patch_script()
        if patch is None or not patch.exists():
            print("purejaxrl: patch script not found; pass --patch-script", file=sys.stderr)
            return 2
        tmp = tempfile.TemporaryDirectory(prefix="purejaxrl_")
        try:
            ppo, base = load_purejaxrl(args.purejaxrl_git, patch, pathlib.Path(tmp.name))
        except (subprocess.CalledProcessError, OSError) as err:
            print(f"purejaxrl: cannot load from {args.purejaxrl_git}: {err}", file=sys.stderr)
            return 2

    results = []

    def race(cases: list[Case]) -> None:
        for i in range(repeats):  # alternate the implementations call by call
            for case in cases:
                case.call(i + 1)
        for case in cases:
            results.append(case.result())
            _print(results[-1])

    ours = engine_case("jaxcredit_ppo_cartpole", 4, 500_000)
    cases = [ours]
    if ppo is not None:
        cases.append(purejaxrl_case("purejaxrl_ppo_cartpole", ppo, base))
    race(cases)
    if ppo is not None:
        ratio = results[0]["sps"] / results[1]["sps"]
        print(f"ratio jaxcredit/purejaxrl sps={ratio:.2f} (same process, alternating calls)")
    else:
        ref = PUREJAXRL_REFERENCE
        print(f"purejaxrl not run (no --purejaxrl-git); reference sps={ref['sps']} "
              f"compile_s={ref['compile_s']} ({ref['source']}); "
              f"ratio vs reference={results[0]['sps'] / ref['sps']:.2f}")

    if not args.quick:
        big_steps = args.big_envs * 128 * args.big_updates
        cases = [engine_case(f"jaxcredit_ppo_cartpole_{args.big_envs}envs", args.big_envs,
                             big_steps)]
        if ppo is not None and args.compare_all:
            cases.append(purejaxrl_case(f"purejaxrl_ppo_cartpole_{args.big_envs}envs", ppo, base,
                                        num_envs=args.big_envs, total_timesteps=big_steps))
        race(cases)
        cases = [engine_case(f"jaxcredit_ppo_cartpole_{args.seeds}seeds", 4,
                             int(args.seeds_timesteps), seeds=args.seeds)]
        if ppo is not None and args.compare_all:
            cases.append(purejaxrl_case(f"purejaxrl_ppo_cartpole_{args.seeds}seeds", ppo, base,
                                        total_timesteps=args.seeds_timesteps, seeds=args.seeds))
        race(cases)

    if estimator_names:
        # Learned estimators' cost: A2C at one size (256 envs × 16 steps, 50 updates), same process,
        # alternating calls; the ratio is time per env step relative to A2C+GAE.
        cases = [engine_case(f"jaxcredit_a2c_{name}", 256, 256 * 16 * 50, algo="a2c",
                             estimator=name, num_steps=16, env=args.estimator_env)
                 for name in estimator_names]
        race(cases)
        gae_sps = results[-len(cases)]["sps"]
        for result in results[-len(cases):]:
            result["time_per_step_vs_gae"] = round(gae_sps / result["sps"], 3)
            print(f"{result['label']} time_per_step_vs_gae={result['time_per_step_vs_gae']:.2f}")

    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"backend": jax.default_backend(), "jax": jax.__version__, "results": results},
            indent=2) + "\n")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
