"""Learner presets shared by the experiments, the showcase and the benchmarks.

A learner is a label for a set of ``TrainConfig`` fields, by their flat (flag) names
(``estimator_options``, ``estimator_fit_steps``; ``TrainConfig.from_flat`` builds the config).
Two suffixes make the ablations every credit experiment reports:

* ``"<learner> oracle"``: the learner's hindsight model (or return-decomposition model)
  replaced by the exact one of the current policy (``model="oracle"``; environments with ground
  truth only). If the oracle learns and the
  fitted model does not, the shortfall is the model's; if the oracle fails too, it is the
  estimator's.
* ``"<learner> 1-step"``: the model fitted with one Adam step per update at the agent's learning
  rate (``estimator_fit_steps=1``; pass ``estimator_lr`` = the agent's ``lr``). This approximates
  how learned credit models were trained before they had an optimiser of their own (one shared
  step per A2C update, the agent's learning rate and grad-norm clip), for before/after tables.

>>> learner_fields("hca_return oracle")["estimator_options"]
(('model', 'oracle'),)
"""

from __future__ import annotations

from typing import Any

RUDDER_DEMO_MAX_FIT_STEPS = 100  # the demonstration code has no cap (a while loop)
# PQN's CartPole hyper-parameters (purejaxql config/alg/pqn_cartpole.yaml: LR, MAX_GRAD_NORM,
# GAMMA, LAMBDA, EPS_START, EPS_FINISH, EPS_DECAY), for Hparams.create.
PQN_HPARAMS = dict(lr=1e-4, max_grad_norm=10.0, gamma=0.99, lambda_=0.95, epsilon_start=1.0,
                   epsilon_end=0.2, epsilon_fraction=0.2)

LEARNERS: dict[str, dict[str, Any]] = {
    "REINFORCE": dict(algo="reinforce"),
    "A2C+GAE": dict(algo="a2c", estimator="gae"),
    "PPO+GAE": dict(algo="ppo", estimator="gae"),
    # PQN's network and reward scale (purejaxql config/alg/pqn_cartpole.yaml); its
    # hyper-parameters are PQN_HPARAMS.
    "PQN": dict(algo="pqn", layer_norm=True, hidden_sizes=(256, 256), activation="relu",
                reward_scale=0.1),
    "hca_return": dict(algo="a2c", estimator="hca_return"),
    "hca_return all-action": dict(algo="a2c", estimator="hca_return",
                                  estimator_options=(("form", "all_action"),)),
    # The return read on a coarse fixed grid (8 bins over the environment's return range,
    # two-hot) instead of standardised per batch (docs/hca.md, "A fixed grid").
    "hca_return grid": dict(algo="a2c", estimator="hca_return",
                            estimator_options=(("model_input", "grid"), ("z_bins", 8))),
    # HCA's own model (hca_classes.py, ReturnHCA): a logit table h[s, bin] on one-hot state
    # observations, the return snapped to the nearest point of a fixed grid (16 points over the
    # environment's return range); the experiment supplies num_states and the table's rate.
    "hca_return tabular": dict(algo="a2c", estimator="hca_return",
                               estimator_options=(("model", "tabular"),)),
    # Hindsight-DICE: the ratio π/h learned by DualDICE instead of divided.
    "hca_dice": dict(algo="a2c", estimator="hca_dice"),
    "hca_state": dict(algo="a2c", estimator="hca_state"),
    # Every later step of the window, whatever its length (KeyToDoor's cocoa regime otherwise
    # samples 16 per step beyond L = 32): COCOA's full sums for HCA+.
    "hca_state all-pairs": dict(algo="a2c", estimator="hca_state",
                                estimator_options=(("pairs", "all"),)),
    "c2a2c": dict(algo="a2c", estimator="c2a2c", estimator_options=(("gate", "hard"),)),
    "c2a2c soft": dict(algo="a2c", estimator="c2a2c", estimator_options=(("gate", "soft"),)),
    # Counterfactual Credit Assignment (CCA-PG); "cca gru" builds X_t with a forward GRU over the
    # window, for agents that act from memory (docs/cca.md).
    "cca": dict(algo="a2c", estimator="cca"),
    "cca gru": dict(algo="a2c", estimator="cca", estimator_options=(("agent_state", "gru"),)),
    # Counterfactual contributions (COCOA): the object is the reward value or a learned feature.
    "cocoa_reward": dict(algo="a2c", estimator="cocoa_reward"),
    "cocoa_feature": dict(algo="a2c", estimator="cocoa_feature"),
    # COCOA's hypernet with leaky two-sided outputs, which cannot die (not COCOA's own:
    # hypernet.relu_gate; experiments/key_to_door, "Which coefficient fails").
    "cocoa_reward leaky": dict(algo="a2c", estimator="cocoa_reward",
                               estimator_options=(("gate_leak", 0.01), ("hidden", 256),
                                                  ("model", "hypernet"))),
    # COCOA's hypernet with its values, but a gradient floor where an output is 0, so a dead
    # entry can come back (not COCOA's own: hypernet.relu_gate).
    "cocoa_reward floor": dict(algo="a2c", estimator="cocoa_reward",
                               estimator_options=(("gate_floor", 0.01), ("hidden", 256),
                                                  ("model", "hypernet"))),
    # As "cocoa_reward floor", the credit assigned with the model before the window's own fit.
    "cocoa_reward floor held-out": dict(algo="a2c", estimator="cocoa_reward",
                                        estimator_assign_before_fit=True,
                                        estimator_options=(("gate_floor", 0.01), ("hidden", 256),
                                                           ("model", "hypernet"))),
    # As "cocoa_reward floor", with h = π at the start (the output layers at zero).
    "cocoa_reward floor at-policy": dict(algo="a2c", estimator="cocoa_reward",
                                         estimator_options=(("gate_floor", 0.01), ("hidden", 256),
                                                            ("model", "hypernet"),
                                                            ("start_at_policy", True))),
    # COCOA's hypernet, the agent held still while the model fits its first 100 updates.
    "cocoa_reward warm-up": dict(algo="a2c", estimator="cocoa_reward", model_warmup_updates=100,
                                 estimator_options=(("hidden", 256), ("model", "hypernet"))),
    # As "cocoa_reward floor", the agent held still while the model fits its first 100 updates.
    "cocoa_reward floor warm-up": dict(algo="a2c", estimator="cocoa_reward",
                                       model_warmup_updates=100,
                                       estimator_options=(("gate_floor", 0.01), ("hidden", 256),
                                                          ("model", "hypernet"))),
    # The same learner; experiments/key_to_door clips its agent's gradient (an hparam).
    "cocoa_reward floor warm-up clip": dict(algo="a2c", estimator="cocoa_reward",
                                            model_warmup_updates=100,
                                            estimator_options=(("gate_floor", 0.01),
                                                               ("hidden", 256),
                                                               ("model", "hypernet"))),
    # The hindsight model fitted on the 16 most recent windows instead of the fresh one only.
    "cocoa_reward replay16": dict(algo="a2c", estimator="cocoa_reward", estimator_fit_windows=16),
    # Return decomposition: GAE on the rewards RUDDER redistributes.
    "A2C+RUDDER": dict(algo="a2c", estimator="gae", redistribute="rudder"),
    "PPO+RUDDER": dict(algo="ppo", estimator="gae", redistribute="rudder"),
    # RUDDER's demonstration code (ml-jku/rudder-demonstration-code, rudder.py, watch_repair.py):
    # the cell without forget and output gates, input-gate bias -3, 16 units, inputs Δ-states
    # and actions, returns scaled by 10, a 2048-episode lessons buffer, batches of 8, no use or
    # fitting before 256 episodes with two distinct returns, and each fit run until the running
    # main loss is below 0.15 (here capped at RUDDER_DEMO_MAX_FIT_STEPS per update).
    "A2C+RUDDER demo": dict(
        algo="a2c", estimator="gae", redistribute="rudder",
        redistribute_options=(("batch_episodes", 8), ("cell", "rudder"), ("features", 16),
                              ("input_gate_bias", -3.0), ("inputs", "delta"), ("lessons", 2048),
                              ("return_scale", 10.0), ("warmup_episodes", 256)),
        redistribute_fit_until_loss=0.15, redistribute_fit_steps=RUDDER_DEMO_MAX_FIT_STEPS),
    # Return decomposition by a per-step reward model fitted to stored episodes' returns, at the
    # stages' defaults (the RRD and IRCR codes' settings; docs/return_decomposition.md).
    "A2C+RRD": dict(algo="a2c", estimator="gae", redistribute="rrd"),
    "PPO+RRD": dict(algo="ppo", estimator="gae", redistribute="rrd"),
    "A2C+IRCR": dict(algo="a2c", estimator="gae", redistribute="ircr"),
    "PPO+IRCR": dict(algo="ppo", estimator="gae", redistribute="ircr"),
    # Step rewards from a process reward model (step-checkable tasks: ArithmeticChain).
    "PPO+PRM": dict(algo="ppo", estimator="gae", redistribute="prm"),
    # Outcome-only group baselines of RL post-training (set group_size): PPO's clipped loss on
    # the group advantage as it is, no critic.
    "PPO+GRPO": dict(algo="ppo", estimator="grpo", critic=False, normalize_advantage=False),
    "PPO+Dr.GRPO": dict(algo="ppo", estimator="dr_grpo", critic=False,
                        normalize_advantage=False),
    "PPO+RLOO": dict(algo="ppo", estimator="rloo", critic=False, normalize_advantage=False),
    # Turn-level credit: the Beta-Bernoulli belief (its credit is a difference of pass rates, a
    # small number, so advantages are standardised), and RLOO plus the known answer's hints.
    "PPO+belief": dict(algo="ppo", estimator="belief", critic=False, normalize_advantage=True),
    "PPO+known_answer": dict(algo="ppo", estimator="known_answer", critic=False,
                             normalize_advantage=False),
}
SUFFIXES = ("oracle", "1-step")


def learner_fields(label: str, **overrides: Any) -> dict[str, Any]:
    """The ``TrainConfig`` fields of learner ``label`` (with an optional suffix), then
    ``overrides`` (estimator options are merged, the override winning), by their flat names:
    ``TrainConfig.from_flat(**learner_fields(label, env="KeyToDoor"))``."""
    base, suffix = label, None
    for candidate in SUFFIXES:
        if label.endswith(" " + candidate):
            base, suffix = label[: -len(candidate) - 1], candidate
    if base not in LEARNERS:
        raise ValueError(f"unknown learner {label!r}; known: {', '.join(LEARNERS)} "
                         f"(optionally with a suffix: {', '.join(SUFFIXES)})")
    fields = dict(LEARNERS[base])
    options = dict(fields.get("estimator_options", ()))
    if suffix == "oracle" and "redistribute" in fields:
        # A redistributor's exact model: RUDDER's exact return prediction, the PRM's labeller.
        fields["redistribute_options"] = (("model", "oracle"),)
    elif suffix == "oracle":
        options["model"] = "oracle"
    if suffix == "1-step":
        fields["estimator_fit_steps"] = 1
    options.update(dict(overrides.pop("estimator_options", ())))
    fields.update(overrides)
    if options:
        fields["estimator_options"] = tuple(sorted(options.items()))
    return fields
