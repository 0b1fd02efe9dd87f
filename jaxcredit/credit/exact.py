"""The exact credit of the current policy, for the stages that read it: one object per run.

On an environment with a tabular MDP (``jaxcredit.exact.tabular``) dynamic programming gives,
for the current policy and inside the compiled step, the exact model a learned credit stage
approximates (``jaxcredit.exact.models``). :class:`ExactCredit` holds what that needs and checks,
in one place, whether an oracle can be built here:

* ``ground_truth``: the MDP the credit stages may read (None where they may read none: under
  ``DelayedReward`` the oracles would need the delayed process's own MDP);
* ``reference``: the MDP the diagnostics and an exact redistributor read (the same, or under
  ``DelayedReward`` the undelayed one, with the same J(π) and the Q of the undelayed reward).

The policy is a function ``logits(params, obs) -> [..., A]`` and its parameters, never a network
class: π[s, a] = softmax(logits(params, o(s))) over the MDP's observations.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

import jax

from jaxcredit.exact import ground_truth as gt_lib
from jaxcredit.exact.ground_truth import GroundTruth

Array = jax.Array
LogitsFn = Callable[[Any, Array], Array]


@dataclasses.dataclass(frozen=True)
class ExactCredit:
    """What the oracles and the credit-error read-outs of one run compute from (module docstring).

    Attributes:
      ground_truth: the credit stages' ground truth, or None.
      reference: the diagnostics' and exact redistributor's ground truth, or None.
      state_index: ``env_state -> int`` index of the reference MDP's state, or None.
    """

    ground_truth: Optional[GroundTruth]
    reference: Optional[GroundTruth]
    state_index: Optional[Callable[[Any], Array]] = None

    def policy_table(self, logits: LogitsFn, params: Any) -> Array:
        """π[s, a] of ``logits`` at ``params`` over the reference MDP's states."""
        return gt_lib.policy_table(logits, params, self.reference.mdp())

    def model(self, kind: str, pi: Array, gamma: Any) -> Any:
        """The exact model ``kind`` of the policy table ``pi`` (the oracle's parameters)."""
        return gt_lib.exact_model_params(kind, self.ground_truth, self.ground_truth.mdp(), pi,
                                         gamma)

    def redistribution(self, kind: str, pi: Array) -> Any:
        """The exact model ``kind`` an exact redistributor reads, at γ = 1, on the reference."""
        return gt_lib.exact_model_params(kind, self.reference, self.reference.mdp(), pi, 1.0)

    def index(self, env_states: Any) -> Array:
        """The tabular index of each state of a ``[T, N]`` window of gymnax states (what
        ``Trajectory.state`` holds for the oracles and the credit error)."""
        if self.state_index is None:
            raise ValueError("this environment has no tabular MDP to index its states in")
        return jax.vmap(jax.vmap(self.state_index))(env_states)

    def unavailable(self, kind: str, where: str) -> str:
        """Why the exact model ``kind`` cannot be computed here ("" if it can)."""
        if self.ground_truth is None:
            return f"{where} has no exact ground truth"
        return gt_lib.exact_unavailable(kind, self.ground_truth, where=where)


def make_exact_credit(env: Any, env_params: Any, kinds: Sequence[Optional[str]] = (),
                      redistribution_kinds: Sequence[Optional[str]] = ()) -> ExactCredit:
    """The :class:`ExactCredit` of ``env`` with the exact models ``kinds`` planned for the
    credit stages and ``redistribution_kinds`` for an exact redistributor; both None where the
    environment has no tabular MDP."""
    ground_truth = gt_lib.make_ground_truth(env, env_params, (*kinds, *redistribution_kinds))
    if ground_truth is not None:
        return ExactCredit(ground_truth, ground_truth, env.state_index)
    if gt_lib.has_undelayed_truth(env):
        reference = gt_lib.make_ground_truth(env.undelayed, env_params, redistribution_kinds)
        return ExactCredit(None, reference, lambda s: env.undelayed.state_index(s.env_state))
    return ExactCredit(None, None, None)
