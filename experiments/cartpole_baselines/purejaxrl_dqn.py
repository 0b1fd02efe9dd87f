"""PureJaxRL's own DQN on CartPole-v1, scored with run.py's DQN bars.

run.py's DQN misses one of its bars at 8 seeds: one seed averages 164 over its last 5 greedy
evaluations. This script asks whether PureJaxRL's DQN (``purejaxrl/dqn.py``, loaded unedited
through :mod:`jaxcredit.bench.purejaxrl`) spreads as widely at the same settings and budget.
If it does, the spread belongs to DQN on CartPole; if it does not, jaxcredit's DQN has a defect
to find.

The measurement is the one run.py makes. The greedy policy (argmax of the Q-network) plays 8
episodes at each of the last 5 evaluation points, 2.4·10⁵, 2.55·10⁵, ..., 3·10⁵ env steps. A
seed's score is the mean of those 5 evaluations. PureJaxRL's ``train`` is one scan that returns
only its final state, so the policy at each point is the final policy of a run with that budget.
A run with a smaller budget takes the same steps as the longer one: the keys are drawn in the
same order, ε depends on the step count only, and the learning rate does not decay. So one run
per evaluation point is the same run cut short.

PureJaxRL's settings are its own defaults (the ``config`` in ``dqn.py``'s ``main``), except
``TOTAL_TIMESTEPS``, which is run.py's budget. Its seeds come from ``jax.random.split`` of
``PRNGKey(SEED)``, as in its ``main``.

Seeds. ``dqn.py``'s ``train(rng)`` resets its environments with ``rng``, then replaces it with
a constant (``rng = jax.random.PRNGKey(0)  # use a dummy rng here``) from which the network's
initial parameters, the exploration and the replay samples are all drawn. So its seeds share
one network initialisation and one key stream and differ only in the environments' first
states. ``--independent-seeds`` gives each seed its own: the module's ``jax.random.PRNGKey``
is rebound, from the outside, to fold the constant into the seed's key
(:func:`independent_seeds`). Nothing else changes.

    python experiments/cartpole_baselines/purejaxrl_dqn.py --purejaxrl-git DIR --publish
    python experiments/cartpole_baselines/purejaxrl_dqn.py --purejaxrl CHECKOUT --size smoke
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import tempfile
import time
import types

import numpy as np
import tyro

from jaxcredit import experiment as X

HERE = pathlib.Path(__file__).resolve().parent
SIZES = {
    "smoke": dict(seeds=2, budgets=(20_000, 30_000), bars=False),
    "cpu": dict(seeds=8, budgets=(240_000, 255_000, 270_000, 285_000, 300_000), bars=True),
}
EPISODES = 8  # greedy episodes per evaluation, as run.py's eval_episodes


@dataclasses.dataclass
class Args(X.OutputArgs):
    """PureJaxRL's DQN on CartPole-v1, scored with run.py's DQN bars (module docstring)."""

    purejaxrl: str | None = None
    """a PureJaxRL checkout (the folder holding purejaxrl/dqn.py)"""
    purejaxrl_git: str | None = None
    """or a (bare) git directory of PureJaxRL; its HEAD is used"""
    size: str = "cpu"
    """smoke | cpu"""
    seeds: int | None = None
    """seeds (default: the size's)"""
    independent_seeds: bool = False
    """give each seed its own network initialisation and key stream (module docstring)"""


def load(args: Args, workdir: pathlib.Path):
    """PureJaxRL's dqn module, its default config and its revision."""
    from jaxcredit.bench import purejaxrl as lib  # noqa: PLC0415

    if bool(args.purejaxrl) == bool(args.purejaxrl_git):
        raise ValueError("give one of --purejaxrl CHECKOUT or --purejaxrl-git DIR")
    if args.purejaxrl:
        root = pathlib.Path(args.purejaxrl).expanduser()
        folder = next((f for f in (root / "purejaxrl", root) if (f / lib.DQN_FILE).is_file()),
                      None)
        if folder is None:
            raise ValueError(f"--purejaxrl {args.purejaxrl}: no purejaxrl/{lib.DQN_FILE} there")
        revision = lib.describe(folder)
    else:
        folder = lib.export_from_git(args.purejaxrl_git, workdir, files=(lib.DQN_FILE,))
        revision = lib.describe(folder, args.purejaxrl_git)
    dqn, defaults = lib.load_dqn(folder)
    if args.independent_seeds:
        independent_seeds(dqn)
    return dqn, defaults, revision


def independent_seeds(dqn) -> None:
    """Rebinds ``dqn``'s ``jax.random.PRNGKey`` so that the constant key ``train(rng)`` makes
    for itself becomes ``fold_in(rng, constant)``: each seed's own key (module docstring).

    ``train`` is traced once under ``jax.vmap``; while it is traced, ``PRNGKey`` reads the seed
    key of the call being traced, so the folded key is batched over seeds like ``rng``."""
    import jax  # noqa: PLC0415

    tracing = {}
    random_view = types.ModuleType("jax.random")
    random_view.__dict__.update({k: v for k, v in vars(jax.random).items()
                                 if not k.startswith("__")})
    random_view.PRNGKey = lambda seed: jax.random.fold_in(tracing["rng"], seed)
    dqn.jax.random = random_view
    make_train = dqn.make_train

    def make_seeded_train(config):
        train = make_train(config)

        def seeded_train(rng):
            tracing["rng"] = rng
            try:
                return train(rng)
            finally:
                tracing.pop("rng")

        return seeded_train

    dqn.make_train = make_seeded_train


def greedy_returns(q_network, params, key, episodes: int):
    """Undiscounted return of the greedy policy ``argmax_a Q(s, a)`` on CartPole-v1, per seed:
    the mean over ``episodes`` episodes, each played to its end (termination or the 500-step
    limit). ``params`` has a leading seed axis."""
    import gymnax  # noqa: PLC0415
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415

    env, env_params = gymnax.make("CartPole-v1")

    def episode(params, key):
        reset_key, key = jax.random.split(key)
        obs, state = env.reset(reset_key, env_params)

        def step(carry, step_key):
            obs, state, total, alive = carry
            action = jnp.argmax(q_network.apply(params, obs))
            obs, state, reward, terminated, truncated, _ = env.step(step_key, state, action,
                                                                     env_params)
            total = total + alive * reward  # gymnax resets by itself: count until the first end
            alive = alive * (1.0 - jnp.logical_or(terminated, truncated))
            return (obs, state, total, alive), None

        keys = jax.random.split(key, env_params.max_steps_in_episode)
        (_, _, total, _), _ = jax.lax.scan(step, (obs, state, 0.0, 1.0), keys)
        return total

    def per_seed(params, key):
        return jnp.mean(jax.vmap(episode, in_axes=(None, 0))(params, jax.random.split(key,
                                                                                       episodes)))

    seeds = jax.tree.leaves(params)[0].shape[0]
    return np.asarray(jax.jit(jax.vmap(per_seed))(params, jax.random.split(key, seeds)))


def evaluate(dqn, defaults: dict, size: dict) -> dict:
    """Trains PureJaxRL's DQN once per budget (all seeds vmapped) and evaluates each final greedy
    policy; returns the [seeds, budgets] greedy returns and PureJaxRL's own training return."""
    import jax  # noqa: PLC0415

    greedy, training, seconds = [], [], []
    for budget in size["budgets"]:
        config = dict(defaults, TOTAL_TIMESTEPS=budget, NUM_SEEDS=size["seeds"],
                      WANDB_MODE="disabled")
        keys = jax.random.split(jax.random.PRNGKey(config["SEED"]), size["seeds"])
        start = time.time()
        out = jax.block_until_ready(jax.jit(jax.vmap(dqn.make_train(config)))(keys))
        seconds.append(time.time() - start)
        params = out["runner_state"][0].params
        network = dqn.QNetwork(action_dim=2)
        greedy.append(greedy_returns(network, params, jax.random.PRNGKey(budget), EPISODES))
        # PureJaxRL's own metric: the mean over envs of each env's last finished episode
        # return, per step; here its mean over the last 10% of the run.
        returns = np.asarray(out["metrics"]["returns"])
        training.append(returns[:, -max(1, returns.shape[1] // 10):].mean(axis=1))
        print(f"budget {budget:,}: greedy {', '.join(f'{v:.1f}' for v in greedy[-1])} "
              f"({seconds[-1]:.0f} s)", flush=True)
    return {"greedy": np.stack(greedy, axis=1), "training_last_10pct": np.stack(training, 1),
            "seconds": seconds}


def report(out: pathlib.Path, result: dict, meta: dict) -> list[str]:
    stem = "purejaxrl_dqn_independent_seeds" if meta["independent_seeds"] else "purejaxrl_dqn"
    label = ("PureJaxRL DQN, independent seeds" if meta["independent_seeds"]
             else "PureJaxRL DQN (its seeds share one initialisation)")
    greedy = result["greedy"]
    last = greedy.mean(axis=1)
    checks = {"best greedy evaluation ≥ 450": bool(greedy.max() >= 450),
              "every seed's mean over its last 5 greedy evaluations ≥ 250":
                  bool(last.min() >= 250)}
    ours_file = HERE / "results" / "results.json"
    ours = None
    if ours_file.is_file():
        published = json.loads(ours_file.read_text())
        ours = np.asarray(published["dqn_last5_mean"])
    results = {"meta": meta, "greedy": greedy.tolist(), "last5_mean": last.tolist(),
               "training_return_last_10pct": result["training_last_10pct"][:, -1].tolist(),
               "checks": checks if meta["bars"] else {}}
    (out / f"{stem}.json").write_text(json.dumps(results, indent=1))
    lines = [f"# PureJaxRL's DQN ({meta['revision']}) on CartPole-v1, scored with run.py's bars "
             f"(size '{meta['size']}', {meta['seeds']} seeds)", "",
             f"`{meta['command']}`: {sum(meta['seconds']):.0f} s of training, compiles "
             "included.", "",
             "| learner | greedy return per seed, mean of the evaluations at "
             f"{', '.join(f'{b:,}' for b in meta['budgets'])} steps | mean ± 95% CI | "
             "lowest seed | seeds < 250 |", "|---|---|---|---|---|",
             f"| {label} | {', '.join(f'{v:.0f}' for v in last)} | "
             f"{X.mean_ci_cell(last, 1)} | {last.min():.0f} | {int(np.sum(last < 250))} |"]
    if ours is not None and meta["bars"]:
        lines.append(f"| jaxcredit DQN (results.json) | {', '.join(f'{v:.0f}' for v in ours)} | "
                     f"{X.mean_ci_cell(ours, 1)} | {ours.min():.0f} | "
                     f"{int(np.sum(ours < 250))} |")
    lines.append("")
    if meta["bars"]:
        lines += ["| PureJaxRL against run.py's DQN bars | passed |", "|---|---|"]
        lines += [f"| {name} | {'yes' if ok else 'NO'} |" for name, ok in checks.items()]
    else:
        lines.append("(The smoke size is too short for the bars; they apply at the cpu size.)")
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return [f"{stem}.md", f"{stem}.json"]


def main(argv=None) -> int:
    args = tyro.cli(Args, args=argv)
    if args.set or args.hparam:
        print("purejaxrl_dqn.py: error: --set and --hparam do not apply here: "
              "it runs PureJaxRL's own DQN, not engine runs", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out) if args.out else X.default_out("cartpole_baselines_purejaxrl")
    try:
        size = X.chosen_size(SIZES, args)
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as workdir:
            dqn, defaults, revision = load(args, pathlib.Path(workdir))
    except (ValueError, OSError) as err:
        print(f"purejaxrl_dqn.py: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    result = evaluate(dqn, defaults, size)
    meta = {"size": args.size, "seeds": size["seeds"], "budgets": list(size["budgets"]),
            "bars": size["bars"], "independent_seeds": args.independent_seeds,
            "episodes": EPISODES, "revision": revision, "seconds": result["seconds"],
            "config": {k: v for k, v in defaults.items() if k not in ("ENTITY", "PROJECT")},
            "command": "python experiments/cartpole_baselines/purejaxrl_dqn.py "
                       + " ".join(sys.argv[1:] if argv is None else argv)}
    files = report(out, result, meta)
    print(f"report in {out}: {', '.join(files)}")
    return X.publish_if_asked(args, out, HERE, files, "purejaxrl_dqn.py")


if __name__ == "__main__":
    sys.exit(main())
