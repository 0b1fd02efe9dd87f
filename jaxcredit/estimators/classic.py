"""Parameter-free credit estimators as :class:`Estimator` records: GAE, TD(λ), Monte Carlo, n-step.

Each one turns a :class:`Trajectory` into per-step advantages ``G_t - V(s_t)`` and value targets
``G_t``, with the episode-end conventions of docs/design.md (a time-out bootstraps from V(final
observation), a termination does not, and no return crosses an episode boundary).
"""

from __future__ import annotations

from typing import Any


from jaxcredit.estimators import returns
from jaxcredit.estimators.base import Estimator
from jaxcredit.types import Credit, Trajectory


def _credit(targets, trajectory: Trajectory) -> Credit:
    advantage = targets - trajectory.value
    return Credit(
        advantage=advantage,
        value_target=targets,
        diagnostics={"advantage_mean": advantage.mean(), "advantage_std": advantage.std()},
    )


def gae(method: returns.Method = None) -> Estimator:
    """Generalized advantage estimation (Schulman et al. 2016) with γ = ``hparams.gamma``,
    λ = ``hparams.lambda_``."""

    def assign(params: Any, trajectory: Trajectory, hparams: Any, key: Any) -> Credit:
        del params, key
        advantage, targets = returns.gae(
            trajectory.reward, trajectory.value, trajectory.next_value, trajectory.terminated,
            trajectory.truncated, hparams.gamma, hparams.lambda_, method=method)
        return Credit(
            advantage=advantage,
            value_target=targets,
            diagnostics={"advantage_mean": advantage.mean(), "advantage_std": advantage.std()},
        )

    return Estimator(name="gae", assign=assign, continuous_actions=True)


def lambda_returns(method: returns.Method = None) -> Estimator:
    """TD(λ): advantage = λ-return - V(s_t). Same numbers as :func:`gae`, computed as returns."""

    def assign(params: Any, trajectory: Trajectory, hparams: Any, key: Any) -> Credit:
        del params, key
        targets = returns.episode_aware_lambda_returns(
            trajectory.reward, trajectory.next_value, trajectory.terminated, trajectory.truncated,
            hparams.gamma, hparams.lambda_, method=method)
        return _credit(targets, trajectory)

    return Estimator(name="lambda_returns", assign=assign, continuous_actions=True)


def monte_carlo(method: returns.Method = None) -> Estimator:
    """Monte-Carlo return G_t − V(s_t) (λ = 1), bootstrapped only at time-outs and window ends.

    ``hparams.lambda_`` is ignored. With a window that covers whole episodes it is REINFORCE's
    return, and the critic is the baseline."""

    def assign(params: Any, trajectory: Trajectory, hparams: Any, key: Any) -> Credit:
        del params, key
        targets = returns.episode_aware_lambda_returns(
            trajectory.reward, trajectory.next_value, trajectory.terminated, trajectory.truncated,
            hparams.gamma, 1.0, method=method)
        return _credit(targets, trajectory)

    return Estimator(name="mc", assign=assign, continuous_actions=True)


def n_step(n: int = 5) -> Estimator:
    """n-step bootstrapped return; the horizon stops at episode ends (``hparams.lambda_``
    unused)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"nstep estimator: n must be a positive integer, got {n!r}")

    def assign(params: Any, trajectory: Trajectory, hparams: Any, key: Any) -> Credit:
        del params, key
        targets = returns.episode_aware_n_step_returns(
            trajectory.reward, trajectory.next_value, trajectory.terminated, trajectory.truncated,
            hparams.gamma, n)
        return _credit(targets, trajectory)

    return Estimator(name="nstep", assign=assign, continuous_actions=True)



