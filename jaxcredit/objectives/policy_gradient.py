"""Policy-gradient objectives: ``pg`` (A2C, REINFORCE) and ``ppo`` (clipped surrogate).

Both compute, on a flat minibatch,

    L = L_policy − ent_coef · H[π_θ] + vf_coef · L_value

with the policy surrogate of ``losses.policy_loss`` (per-step or all-action credit; clipped for
``ppo``), the value loss of ``losses.value_loss`` against ``credit.value_target`` (PPO's clipped
form when ``clip_value_loss``) and the mean entropy. Without a critic there is no value term.
log π and the entropy come from the policy's law of actions (``action_distribution`` of the
engine's context: categorical, or a Gaussian for continuous actions).
"""

from __future__ import annotations

from typing import Any, Optional

from jaxcredit.objectives import Objective, PolicyOutputs, losses
from jaxcredit.policies import ActionDistribution
from jaxcredit.types import Credit, Trajectory


def _objective(name: str, clip_policy: bool, critic: bool, normalize_advantage: bool,
               clip_value_loss: bool, distribution: Optional[ActionDistribution]) -> Objective:
    def loss(outputs: PolicyOutputs, batch: Trajectory, credit: Credit, hparams: Any):
        advantage = credit.advantage
        if normalize_advantage:
            advantage = losses.normalize_advantage(advantage)
        pg_loss, metrics = losses.policy_loss(
            outputs.logits, batch.action, advantage, batch.log_prob, batch.logits,
            hparams.clip_eps, clip_policy, distribution)
        entropy = losses.entropy(outputs.logits, distribution)
        total = pg_loss - hparams.ent_coef * entropy
        metrics = {"policy_loss": pg_loss, "entropy": entropy, **metrics}
        if critic:
            v_loss = losses.value_loss(outputs.value, batch.value, credit.value_target,
                                       hparams.clip_eps, clip_value_loss)
            total = total + hparams.vf_coef * v_loss
            metrics["value_loss"] = v_loss
        return total, metrics

    return Objective(name=name, loss=loss)


def policy_gradient(critic: bool = True, normalize_advantage: bool = False,
                    clip_value_loss: bool = False,
                    action_distribution: Optional[ActionDistribution] = None) -> Objective:
    """The unclipped policy gradient −log π(a|s) Â (Williams 1992; Mnih et al. 2016), or its
    all-action form −Σ_a π(a|s) Â(a) (Sutton et al. 2000; Asadi et al. 2017)."""
    return _objective("pg", False, critic, normalize_advantage, clip_value_loss,
                      _continuous(action_distribution))


def ppo(critic: bool = True, normalize_advantage: bool = True,
        clip_value_loss: bool = True,
        action_distribution: Optional[ActionDistribution] = None) -> Objective:
    """PPO's clipped surrogate (Schulman et al. 2017), and its all-action clipped form for
    all-action credit (``jaxcredit.objectives.losses``)."""
    return _objective("ppo", True, critic, normalize_advantage, clip_value_loss,
                      _continuous(action_distribution))


def _continuous(distribution: Optional[ActionDistribution]) -> Optional[ActionDistribution]:
    # A categorical policy keeps the losses' own categorical path (the same program as before).
    return distribution if distribution is not None and distribution.continuous else None
