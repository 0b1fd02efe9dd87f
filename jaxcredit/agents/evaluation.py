"""Evaluation inside the compiled run: fresh episodes of the current policy, sampled and greedy.

Every ``eval_every`` updates the engine plays ``eval_episodes`` episodes with actions sampled
from π and as many with the greedy action argmax π, on their own environment instances and with
keys of their own (``fold_in(eval_key, update)``), so turning evaluation on or off never changes
the training run. Each episode runs from a reset until its first end (termination or time limit)
or ``max_steps`` steps, and the loop stops once every episode has ended. Reported:
``eval/return`` and ``eval/return_greedy`` (means over the episodes) and ``eval/length``. The
returns the agent saw while training (``episode_return``) come from a policy that changed
during the window and from episodes cut anywhere; these do not.

``make_evaluate`` gives the on-policy engine's ``evaluate(state, hparams)``: those episodes, the
exact J(π) and the task's metrics on environments with ground truth (the target policy's table),
and the credit transform's read-outs against exact models on a held-out window
(``CreditTransform.diagnose``).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp

from jaxcredit.exact import ground_truth as gt_lib
from jaxcredit.policies import ActionDistribution

Array = jax.Array


def play_episodes(env: Any, env_params: Any, policy: Callable[[Any, Array, Array], Any],
                  key: Array, num_episodes: int, max_steps: int,
                  success: Optional[Callable[[Array, Array, Array], Array]] = None,
                  memory: Any = (),
                  distribution: Optional[ActionDistribution] = None) -> dict[str, Array]:
    """``num_episodes`` sampled and ``num_episodes`` greedy episodes (module docstring).

    Args:
      env, env_params: a gymnax environment.
      policy: ``(memory, obs [B, *obs_shape], first [B]) -> (memory, logits [B, A])``
        (``jaxcredit.agents.rollout.memoryless`` makes one of ``obs -> logits``).
      key: PRNG key for resets, actions and transitions.
      num_episodes: E episodes of each kind.
      max_steps: steps simulated per episode at most.
      success: ``(obs, next_obs, reward) -> bool`` on goal-conditioned environments: adds
        ``success_rate`` and ``success_rate_greedy``, the fractions of episodes that reached
        their goal.
      memory: the policy's memory of 2E fresh episodes (``()`` for a memoryless policy).
      distribution: the law of actions given the policy's outputs (None: categorical); the
        greedy episodes play its mode (the Gaussian's mean), both kinds go to the environment
        through ``distribution.to_env``.

    Returns:
      ``{"return", "return_greedy", "length"}`` scalars (and the success rates).
    """
    total = 2 * num_episodes
    greedy = jnp.arange(total) >= num_episodes
    reset_key, run_key = jax.random.split(key)
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
        jax.random.split(reset_key, total), env_params)
    step_env = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    step_keys = jax.random.split(run_key, max_steps)

    def one_step(carry):
        i, obs, env_state, alive, ret, length, reached, memory, first = carry
        step_key = step_keys[i]
        act_key, env_key = jax.random.split(step_key)
        memory, logits = policy(memory, obs, first)
        law = distribution or ActionDistribution("categorical", logits.shape[-1])
        pick = greedy.reshape(greedy.shape + (1,) * len(law.action_shape()))
        action = jnp.where(pick, law.mode(logits), law.sample(act_key, logits))
        next_obs, env_state, reward, terminated, truncated, info = step_env(
            jax.random.split(env_key, total), env_state, law.to_env(action), env_params)
        ret = ret + jnp.where(alive, reward.astype(jnp.float32), 0.0)
        length = length + alive
        if success is not None:
            reached = reached | (alive & success(obs, info["final_observation"], reward))
        alive = alive & ~(terminated | truncated)
        first = terminated | truncated
        return i + 1, next_obs, env_state, alive, ret, length, reached, memory, first

    def playing(carry):
        i, alive = carry[0], carry[3]
        return (i < max_steps) & jnp.any(alive)

    # Stops once every episode has ended: the steps after it would change nothing (every sum
    # is masked by ``alive``), and a poor policy's episodes end long before ``max_steps``.
    init = (jnp.int32(0), obs, env_state, jnp.ones((total,), bool),
            jnp.zeros((total,), jnp.float32), jnp.zeros((total,), jnp.int32),
            jnp.zeros((total,), bool), memory, jnp.ones((total,), bool))
    _, _, _, _, ret, length, reached, _, _ = jax.lax.while_loop(playing, one_step, init)
    sampled = ~greedy
    out = {
        "return": jnp.sum(jnp.where(sampled, ret, 0.0)) / num_episodes,
        "return_greedy": jnp.sum(jnp.where(greedy, ret, 0.0)) / num_episodes,
        "length": jnp.sum(jnp.where(sampled, length, 0)).astype(jnp.float32) / num_episodes,
    }
    if success is not None:
        out["success_rate"] = jnp.sum(sampled & reached) / num_episodes
        out["success_rate_greedy"] = jnp.sum(greedy & reached) / num_episodes
    return out


def make_evaluate(env: Any, env_params: Any, agent_net: Any, law: ActionDistribution,
                  episodes: int, max_steps: int, success: Optional[Callable], reference: Any,
                  exact_policy: bool, target_logits: Callable, credit: Any,
                  collect: Callable, credit_context: Callable):
    """``evaluate(state, hparams) -> metrics`` of the on-policy engine (module docstring).

    Args:
      reference: the ground truth evaluation reads (None: no exact metrics).
      exact_policy: the policy can be read as a table π[s, a].
      target_logits: ``(agent_params, obs) -> logits`` of the target policy.
      credit: the run's credit transform; collect: the engine's ``collect``;
      credit_context: ``state -> jaxcredit.credit.Context``.
    """

    def evaluate(state, hparams) -> dict[str, Array]:
        key = jax.random.fold_in(state.eval_key, state.update)
        keys = jax.random.split(key, 5)  # play, window, then the credit read-outs' three
        play_key, window_key = keys[0], keys[1]

        def policy(memory, obs, first):  # the target policy: no exploration mixture
            if state.runner.normalizer is not None:  # the training statistics, frozen
                obs = state.runner.normalizer.observation(obs)
            return agent_net.act(state.agent.params, memory, obs, first, target=True)

        played = play_episodes(env, env_params, policy, play_key, episodes, max_steps, success,
                               agent_net.initial_memory(2 * episodes), law)
        metrics = {f"eval/{k}": v for k, v in played.items()}
        if reference is not None and exact_policy:
            mdp = reference.mdp()
            pi = gt_lib.policy_table(target_logits, state.agent.params, mdp)
            metrics["eval/exact_return"] = gt_lib.exact_return(reference, mdp, pi)
            metrics.update({f"eval/{k}": v for k, v in reference.task_metrics(pi).items()})
        # The credit's read-outs against exact models, at evaluation points only, on a held-out
        # window of the current policy (not used for training).
        if credit.diagnoses:
            traj = collect(state, hparams, window_key).trajectory
            metrics.update(credit.diagnose(state.credit, traj, hparams, keys[2:],
                                           credit_context(state)))
        return {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}

    return evaluate

