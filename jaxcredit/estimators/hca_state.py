"""State-conditioned hindsight credit: ``hca_state`` (HCA Theorem 1; "HCA+" in COCOA).

References: Harutyunyan et al., "Hindsight Credit Assignment", NeurIPS 2019 (arXiv 1912.02503);
Meulemans et al., "Would I have gotten that reward?" (COCOA), NeurIPS 2023 (arXiv 2306.16803).
"""

from __future__ import annotations

from typing import Optional, Union

from jaxcredit.estimators import hindsight_models as hm
from jaxcredit.estimators import hypernet
from jaxcredit.estimators.base import Estimator
from jaxcredit.estimators.contribution import (
    check_pair_options, observation_object, pairwise_estimator)
from jaxcredit.estimators.hca_return import check_choice, obs_ndim


def hca_state(
    pairs: str = "all",
    num_pairs: int = 16,
    chunk: int = 8,
    bootstrap: bool = True,
    mask_zero_reward_loss: bool = False,
    condition_on_reward: bool = False,
    model: Union[str, hm.StateHindsightModel] = "mlp",
    hidden: int = 128,
    policy_modulated: bool = True,
    num_states: Optional[int] = None,
) -> Estimator:
    """State-conditioned HCA (Harutyunyan et al. 2019, Theorem 1; "HCA+" in COCOA) — all-action.

        A[t,a] = (1[a = a_t]/π(a_t|s_t) − 1) r̃_t + Σ_{k>t} γ^{k−t} (h(a|s_t,s_k)/π(a|s_t) − 1) r̃_k

    over steps k of the same episode inside the window, with the discounted-occupancy hindsight
    h_γ(a|s,y) = π(a|s) d_γ(y|s,a) / d_γ(y|s), d_γ(y|s,a) = (1 − γ) Σ_{k≥1} γ^{k−1} P(S_k = y|s,a):
    the identity is exact. r̃ = r, plus, with ``bootstrap``, the tail γ V(s'_{k+1}) folded into the
    last reward of the window or of a truncated episode (so credit beyond the window is assigned
    through the hindsight of the last state: an approximation). The immediate reward uses the
    action taken (no reward model), as in COCOA's implementation of HCA+.
    Loss: the γ^{k−t−1}-weighted cross-entropy of h(a_t|s_t,s_k) over the same pairs; its
    minimiser is h_γ.

    Cost. The pairwise part is O(T²·A) per environment (``pairs="all"``) or O(T·K·A) with
    ``pairs="sampled"`` (K = ``num_pairs`` offsets per step, uniform over the rest of the window,
    importance-weighted: unbiased for the window sum; drawn with the stage's PRNG key). Rows t
    are processed ``chunk`` at a time and rematerialised in the backward pass, so the peak memory
    of the pairwise stage is about 4·N·chunk·K·(2·hidden + 3A) bytes for N environments
    (:func:`hca_state_pair_memory_bytes`; docs/hca.md compares it with XLA's measured allocation).

    Args:
      pairs: "all" (exact double sum over the window) or "sampled".
      num_pairs: K for ``pairs="sampled"``.
      chunk: rows t per chunk.
      bootstrap: fold γ V(final obs) into the reward at window ends and time-outs.
      mask_zero_reward_loss: fit h only on pairs whose later reward is non-zero (COCOA).
      condition_on_reward: the MLP conditions on (s_k, r_k) instead of s_k. The identity still
        holds, because r_k is then a function of the conditioning variable (R_k ⟂ A_t given
        it), and it is what lets hindsight work when states are aliased (DelayedEffect's
        observations): r_k then carries the evidence. A hybrid of HCA+ and COCOA-reward. Its
        target then differs from the exact h(a|s_t, s_k) that ``estimator/kl_to_exact`` uses.
      model: "mlp", "hypernet" (COCOA's network, ``hypernet.hypernet_hindsight``, on
        u = s_k; ``hidden=256`` as COCOA), "tabular" (state observations; needs
        ``num_states``), "oracle" (the exact
        h_γ of the current policy, supplied by the engine on environments with ground truth),
        or a StateHindsightModel.
      hidden: MLP width.
      policy_modulated: logits = stop_gradient(log π(·|s_t)) + f_φ(s_t, s_k).
    """
    check_pair_options(pairs, num_pairs, chunk)
    if not isinstance(model, hm.StateHindsightModel):
        check_choice("model", model, ("mlp", "hypernet", "tabular", "oracle"))
        if model == "tabular" and num_states is None:
            raise ValueError("model='tabular' needs num_states")
    oracle = model == "oracle"

    def build(trajectory):
        if isinstance(model, hm.StateHindsightModel):
            return model
        if oracle:
            return hm.state_oracle()
        if model == "mlp":
            return hm.state_mlp(obs_ndim(trajectory), hidden, policy_modulated,
                                condition_on_reward)
        if model == "hypernet":  # COCOA's HCA+: its hindsight network on u = s_k
            return hypernet.hypernet_hindsight(obs_ndim(trajectory), hidden, obs_ndim(trajectory))
        return hm.state_tabular(num_states, policy_modulated)

    options = dict(pairs=pairs, num_pairs=num_pairs, chunk=chunk, bootstrap=bootstrap,
                   mask_zero_reward_loss=mask_zero_reward_loss)
    return pairwise_estimator(
        "hca_state", build, observation_object(oracle), **options, oracle=oracle,
        exact_model="state_hindsight",
        make_oracle=lambda: hca_state(**options, model="oracle"))


def hca_state_pair_memory_bytes(num_envs: int, num_steps: int, hidden: int, num_actions: int,
                                chunk: int = 8, num_pairs: Optional[int] = None) -> int:
    """Estimated peak bytes of hca_state's pairwise stage (float32), for sizing a run.

    One chunk holds, per environment, ``chunk × K`` pairs with the gathered target features and
    the hidden activations (2·hidden floats) and the logits, log h and ratio (3·A floats);
    K = T − 1 for ``pairs="all"``, ``num_pairs`` for ``pairs="sampled"``. Chunks are processed
    one at a time and rematerialised in the backward pass, so this is also the order of the
    loss's peak. Everything else the estimator stores is O(N·T·(hidden + A)).
    """
    pairs = num_steps - 1 if num_pairs is None else num_pairs
    return 4 * num_envs * min(chunk, num_steps) * pairs * (2 * hidden + 3 * num_actions)
