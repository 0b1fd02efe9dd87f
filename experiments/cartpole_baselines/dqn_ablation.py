"""Why jaxcredit's DQN and PureJaxRL's differed on CartPole: run.py's DQN with PureJaxRL's
differences switched on one group at a time.

jaxcredit's DQN (run.py) and PureJaxRL's ``dqn.py`` share the budget, the network sizes, the
replay, ε, the target period and the learning rate. They differ in:

- ``init``: the Q-network's initialisation. jaxcredit's is LeCun normal, as in DQN
  implementations (PureJaxRL's flax default included); before that it was the actor-critic's
  orthogonal convention (gain √2 hidden, 1 output), which ``orthogonal`` restores here.
- ``target``: jaxcredit's default Double-Q target (``double_q``) against Q-learning's.
- ``clip``: jaxcredit clips the gradient norm at 10; PureJaxRL does not clip.
- ``adam_eps``: Adam's ε, 1e-5 in jaxcredit, optax's 1e-8 in PureJaxRL.
- ``truncation``: jaxcredit bootstraps at the 500-step time limit; PureJaxRL stores
  ``done = terminated or truncated`` and so treats the limit as a termination.

Each variant is one 8-seed run at run.py's size, scored with run.py's DQN score (per seed, the
greedy return averaged over the last 5 evaluations).

    python experiments/cartpole_baselines/dqn_ablation.py --out DIR --publish
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import pathlib
import sys

import numpy as np
import tyro

from jaxcredit import experiment as X

HERE = pathlib.Path(__file__).resolve().parent
# name -> the differences from run.py's DQN that it switches on.
VARIANTS = {
    "run.py (LeCun init)": (),
    "orthogonal init": ("orthogonal",),
    "orthogonal init, Q-learning, no clipping": ("orthogonal", "q_learning", "no_clip"),
    "Q-learning, no clipping": ("q_learning", "no_clip"),
    "Q-learning": ("q_learning",),
    "no clipping": ("no_clip",),
    "orthogonal init, PureJaxRL's target, clipping, Adam ε and time limit":
        ("orthogonal", "q_learning", "no_clip", "adam_eps", "truncation"),
    "PureJaxRL's target, clipping, Adam ε and time limit":
        ("q_learning", "no_clip", "adam_eps", "truncation"),
}


@dataclasses.dataclass
class Args(X.OutputArgs):
    """run.py's DQN with PureJaxRL's differences, one group at a time (module docstring)."""

    seeds: int = 8
    """seeds per variant"""


def run_module():
    spec = importlib.util.spec_from_file_location("cartpole_baselines_run", HERE / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def switched_on(differences: tuple[str, ...]):
    """Patches jaxcredit's DQN for ``differences`` (module docstring); returns an undo."""
    import flax.linen as nn  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415

    from jaxcredit import networks  # noqa: PLC0415
    from jaxcredit.agents import dqn, host_loop, replay  # noqa: PLC0415

    # The host loop keeps one engine per config; a patched variant must build its own.
    host_loop._engine.cache_clear()
    saved = (dqn.QNetwork, replay.Replay.add)
    if "orthogonal" in differences:
        class OrthogonalQNetwork(nn.Module):
            num_actions: int
            hidden_sizes: tuple = (64, 64)
            activation: str = "relu"
            obs_ndim: int = 1
            dueling: bool = False

            @nn.compact
            def __call__(self, obs):
                return networks.MLP(self.hidden_sizes, self.num_actions, self.activation, 1.0,
                                    self.obs_ndim, init="orthogonal")(obs)

        dqn.QNetwork = OrthogonalQNetwork
    if "truncation" in differences:
        add = replay.Replay.add

        def add_with_limit_as_termination(self, state, steps):
            return add(self, state, steps.replace(
                terminated=steps.terminated | steps.truncated,
                truncated=jnp.zeros_like(steps.truncated)))

        replay.Replay.add = add_with_limit_as_termination

    def undo():
        dqn.QNetwork, replay.Replay.add = saved
        host_loop._engine.cache_clear()

    return undo


def main(argv=None) -> int:
    args = tyro.cli(Args, args=argv)
    if args.set or args.hparam:
        print("dqn_ablation.py: error: --set and --hparam do not apply here: "
              "its variants are the settings it compares", file=sys.stderr)
        return 2
    if args.seeds < 2:
        print("dqn_ablation.py: error: need at least 2 seeds", file=sys.stderr)
        return 2
    run = run_module()
    size = dict(run.SIZES["cpu"], seeds=args.seeds)
    (base,) = [case for case in run.cases(size) if case.name == "dqn"]
    out = pathlib.Path(args.out) if args.out else X.default_out("cartpole_dqn_ablation")
    out.mkdir(parents=True, exist_ok=True)
    scores, seconds = {}, {}
    for i, (name, differences) in enumerate(VARIANTS.items()):
        config = base.config
        hparams = dict(run.DQN_HPARAMS)
        if "q_learning" in differences:
            config = config.replace(estimator="q_learning")
        if "no_clip" in differences:
            hparams["max_grad_norm"] = 1e9
        if "adam_eps" in differences:
            config = config.replace(adam_eps=1e-8)
        folder = f"variant{i}"
        undo = switched_on(differences)
        try:
            timing = X.run_cases([X.Case(folder, config, (hparams,), {"variant": name})], out,
                                 num_seeds=args.seeds, seed=0, num_chunks=2)
        finally:
            undo()
        seconds[name] = timing[folder]["seconds"]
        _, greedy = X.curves(out / folder, "eval/return_greedy")
        scores[name] = np.nanmean(greedy[:, -5:], axis=1)
    lines = [f"# DQN on CartPole-v1: run.py's DQN with PureJaxRL's differences ({args.seeds} "
             "seeds per variant)", "",
             "Score per seed: greedy return, mean of the last 5 evaluations (run.py's).", "",
             "| variant | score per seed | mean ± 95% CI | lowest | seeds < 250 |",
             "|---|---|---|---|---|"]
    lines += [f"| {name} | {', '.join(f'{v:.0f}' for v in s)} | {X.mean_ci_cell(s, 1)} | "
              f"{s.min():.0f} | {int(np.sum(s < 250))} |" for name, s in scores.items()]
    (out / "dqn_ablation.md").write_text("\n".join(lines) + "\n")
    command = "python experiments/cartpole_baselines/dqn_ablation.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    (out / "dqn_ablation.json").write_text(json.dumps(
        {"command": command, "seeds": args.seeds, "seconds": seconds,
         "variants": {name: list(VARIANTS[name]) for name in VARIANTS},
         "scores": {name: s.tolist() for name, s in scores.items()}}, indent=1))
    print("\n".join(lines))
    return X.publish_if_asked(args, out, HERE, ["dqn_ablation.md", "dqn_ablation.json"],
                              "dqn_ablation.py")


if __name__ == "__main__":
    sys.exit(main())
