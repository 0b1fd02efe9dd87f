"""Tests of counterfactual contribution analysis: cocoa_reward, cocoa_feature and their parts.

1. hand-checked pieces: the reward-value grouping, the straight-through threshold and the binary
   reward features, the exact reward hindsight of a three-state MDP and the credit it gives;
2. the exact reward hindsight against Monte-Carlo counts of (s_t, a_t, r_k) pairs on TreeMDP;
3. COCOA with exact coefficients is unbiased against the exact policy gradient (TreeMDP,
   KeyToDoor) and has less variance than HCA+ where states overlap; the fitted model's KL to
   the exact one is small (KeyToDoor; on TreeMDP it overfits, a strict xfail);
4. the estimators run in the engine (fitted, oracle, features) with the KL metric, and bad
   options are one-line errors.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import init_and_train
from jaxcredit import diagnostics as D
from jaxcredit.diagnostics import program as P
from jaxcredit import envs
from jaxcredit.agents import TrainConfig, make_engine
from jaxcredit.exact import ground_truth as gt_lib
from jaxcredit.agents.config import Hparams
from jaxcredit.exact import hindsight, tabular
from jaxcredit.estimators import cocoa as C
from jaxcredit.estimators import hypernet
from jaxcredit.estimators import contribution as CO
from jaxcredit.estimators import hca as H
from jaxcredit.estimators import make_estimator
from jaxcredit.types import Trajectory

HP = Hparams.create(gamma=1.0, lambda_=0.9)
KEY = jax.random.key(0)
# Evaluation-point metrics of a fitted model against its exact twin (credit.error).
CREDIT_ERROR_NAMES = ("rmse_to_exact", "corr_to_exact", "sign_agreement", "sign_zero",
                      "rmse_decisive",
                      "decisive_steps", "signed_steps", "grad_cos_fitted", "grad_cos_oracle",
                      "grad_cos_to_oracle", "grad_norm_ratio", "grad_ascent_fitted",
                      "grad_ascent_oracle", "ratio_rmse_to_exact",
                      *(f"rmse_decisive_reward{i}" for i in range(4)))


# ---------------------------------------------------------------------------------------------
# 1. Hand-checked pieces
# ---------------------------------------------------------------------------------------------


def test_reward_index_groups_rewards_by_nearest_value():
    values = jnp.array([0.0, 0.1, 0.2, 0.9])
    rewards = jnp.array([0.0, 0.1, 0.9, 0.2, 0.1000001, 0.88, -1.0])
    np.testing.assert_array_equal(C.reward_index(rewards, values), [0, 1, 3, 2, 1, 3, 0])
    obj = C.reward_value_object(values, one_hot=True)
    tr = _hand_trajectory(jnp.array([[0.0], [0.9]]))
    np.testing.assert_array_equal(obj.apply(None, tr)[:, 0], [[1, 0, 0, 0], [0, 0, 0, 1]])


def test_straight_through_step_is_binary_forward_and_identity_backward():
    x = jnp.array([-1.0, 0.04, 0.05, 0.06, 2.0])
    np.testing.assert_array_equal(C.straight_through_step(x, 0.05), [0, 0, 0, 1, 1])
    grad = jax.grad(lambda v: jnp.sum(C.straight_through_step(v, 0.05) * jnp.arange(5.0)))(x)
    np.testing.assert_array_equal(grad, [0, 1, 2, 3, 4])


def test_reward_features_and_readout_hand_case():
    # One action, two features over a 3-dim observation: gates above 0.05 are on.
    params = {"gate": jnp.array([[[1.0, -1.0, 0.0], [0.0, 0.0, 0.5]]]),
              "readout": jnp.array([[2.0, -3.0]]), "bias": jnp.array([0.5])}
    obs = jnp.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    action = jnp.zeros(3, jnp.int32)
    # feature 0 = 1[x0 > 0.05] (gate mask [1, 0, 0]); feature 1 = 1[x2 > 0.05].
    features = C.reward_features(params, obs, action, 0.05)
    np.testing.assert_array_equal(features, [[1, 0], [0, 0], [0, 1]])
    np.testing.assert_allclose(C.reward_prediction(params, features, action), [2.5, 0.5, -2.5])
    # A second action whose gates read x1 and x2 instead: each sample reads its own action's.
    params = {"gate": jnp.concatenate([params["gate"], jnp.array([[[0.0, 1.0, 0.0],
                                                                    [0.0, 0.0, -1.0]]])]),
              "readout": jnp.array([[2.0, -3.0], [1.0, 1.0]]), "bias": jnp.array([0.5, 0.0])}
    action = jnp.array([1, 0, 1], jnp.int32)
    # Sample 0 (action 1): feature 0 = 1[x1 > 0.05] = 1, feature 1 (gate off) = 0; sample 1
    # (action 0) as above; sample 2 (action 1): x1 = 0, feature 1 off: both 0.
    features = C.reward_features(params, obs, action, 0.05)
    np.testing.assert_array_equal(features, [[1, 0], [0, 0], [0, 0]])
    np.testing.assert_allclose(C.reward_prediction(params, features, action), [1.0, 0.5, 0.0])


def _two_step_mdp():
    """s0 —a0→ s1, s0 —a1→ s2 (reward 0); s1 —b0→ T pays 1, s1 —b1→ T pays 0; s2 → T pays 0."""
    transition = np.zeros((4, 2, 4), np.float32)
    transition[0, 0, 1] = transition[0, 1, 2] = 1.0
    transition[1, :, 3] = transition[2, :, 3] = transition[3, :, 3] = 1.0
    reward = np.zeros((4, 2), np.float32)
    reward[1, 0] = 1.0
    return tabular.make_tabular_mdp(transition, reward, np.eye(4)[0], np.arange(4) == 3,
                                    np.eye(4, dtype=np.float32))


def test_reward_hindsight_hand_case():
    mdp = _two_step_mdp()
    values, probs = hindsight.reward_value_law(mdp)
    np.testing.assert_allclose(values, [0.0, 1.0])
    pi = jnp.full((4, 2), 0.5)
    h = hindsight.reward_hindsight(mdp, pi, 1.0, probs)  # [S, U, A]
    # Reward 1 only ever follows a0: p(a0 | s0, r=1) = 1. Reward 0 follows a0 (then b1) with
    # probability ½·½ and a1 with ½: p(a0 | s0, r=0) = (1/4)/(1/4 + 1/2) = 1/3.
    np.testing.assert_allclose(h[0, 1], [1.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(h[0, 0], [1 / 3, 2 / 3], atol=1e-6)
    # Nothing rewarding follows s1 (its own reward is immediate, not a later step): the prior.
    np.testing.assert_allclose(h[1, 1], [0.5, 0.5], atol=1e-6)


def _hand_trajectory(reward, action=None, state=None):
    num_steps, num_envs = reward.shape
    action = jnp.zeros((num_steps, num_envs), jnp.int32) if action is None else action
    state = jnp.zeros((num_steps, num_envs), jnp.int32) if state is None else state
    done = jnp.zeros((num_steps, num_envs), bool).at[-1].set(True)
    zeros = jnp.zeros((num_steps, num_envs))
    return Trajectory(obs=jax.nn.one_hot(state, 4), action=action, reward=reward,
                      terminated=done, truncated=jnp.zeros_like(done), value=zeros,
                      next_value=zeros, log_prob=zeros, logits=jnp.zeros((num_steps, num_envs, 2)),
                      state=state)


def test_cocoa_credit_with_exact_coefficients_hand_case():
    """Episodes s0 a0 s1 b0 (r = 1) and s0 a0 s1 b1 (r = 0) under the uniform policy.

    A[0, a] = (1[a = a0]/½ − 1)·0 + (w(s0, a, r=1) − 1)·1 with w = p(a|s0, 1)/½ = (2, 0): credit
    (+1, −1) at s0 after the reward, nothing after no reward. Averaged over the four equally
    likely episodes this is (¼, −¼) = A^π(s0, ·) exactly. At s1: (1[b = b0]/½ − 1)·1 = (1, −1).
    """
    mdp = _two_step_mdp()
    gt = gt_lib.GroundTruth(mdp=lambda: mdp, horizon=2, task_metrics=lambda pi: {},
                            reward_law=None,
                            plans={"reward_hindsight": hindsight.reward_value_law(mdp)})
    pi = jnp.full((4, 2), 0.5)
    params = gt_lib.exact_model_params("reward_hindsight", gt, mdp, pi, 1.0)
    est = make_estimator("cocoa_reward", reward_values=(0.0, 1.0), model="oracle")
    traj = _hand_trajectory(jnp.array([[0.0, 0.0], [1.0, 0.0]]),
                            action=jnp.array([[0, 0], [0, 1]]), state=jnp.array([[0, 0], [1, 1]]))
    adv = est.assign(params, traj, HP, KEY).advantage
    np.testing.assert_allclose(adv[0], [[1.0, -1.0], [0.0, 0.0]], atol=1e-5)
    np.testing.assert_allclose(adv[1], [[1.0, -1.0], [0.0, 0.0]], atol=1e-5)
    np.testing.assert_allclose(np.asarray(tabular.advantages(mdp, pi, 1.0))[0], [0.25, -0.25],
                               atol=1e-6)


def test_rewarded_pair_offsets_hand_case_and_unbiased():
    reward = jnp.array([0.0, 1.0, 0.0, 2.0, 3.0])
    offsets, scale = H.rewarded_pair_offsets(jax.random.key(1), reward, 2)
    # t = 1, 2: the two rewarded later steps 3 and 4, exactly; t = 3: step 4 and an unused slot
    # (past the window, scale 0); t = 4: nothing.
    np.testing.assert_array_equal(offsets[1:], [[2, 3], [1, 2], [1, 2], [1, 1]])
    np.testing.assert_array_equal(scale[1:], [[1, 1], [1, 1], [1, 0], [0, 0]])
    # t = 0 has three rewarded later steps (1, 3, 4) for two slots: drawn, scale 3/2, unbiased.
    np.testing.assert_allclose(scale[0], [1.5, 1.5])
    draws = jax.vmap(lambda k: H.rewarded_pair_offsets(k, reward, 2)[0][0])(
        jax.random.split(jax.random.key(2), 3000))
    picked = np.bincount(np.asarray(draws).reshape(-1), minlength=5)[[1, 3, 4]] / draws.size
    np.testing.assert_allclose(picked, [1 / 3] * 3, atol=0.03)


def test_rewarded_pairs_give_the_all_pairs_credit_when_rewards_are_sparse():
    key = jax.random.split(jax.random.key(3), 5)
    num_steps, num_envs = 9, 3
    reward = jnp.where(jax.random.bernoulli(key[0], 0.3, (num_steps, num_envs)), 1.0, 0.0)
    state = jax.random.randint(key[1], (num_steps, num_envs), 0, 4)
    traj = _hand_trajectory(reward, action=jax.random.randint(key[2], reward.shape, 0, 2),
                            state=state)
    traj = traj.replace(logits=jax.random.normal(key[3], (num_steps, num_envs, 2)),
                        terminated=jax.random.bernoulli(key[4], 0.2, reward.shape))
    hp = Hparams.create(gamma=0.9, lambda_=0.9)
    credit, loss = {}, {}
    for pairs in ("all", "rewarded"):
        est = make_estimator("cocoa_reward", reward_values="0,1", hidden=8, pairs=pairs,
                             num_pairs=num_steps)
        params = est.init(jax.random.key(4), traj)
        # A non-trivial model: perturb the zero-initialised output layer.
        params = jax.tree.map(lambda p: p + 0.3 * jax.random.normal(jax.random.key(5), p.shape),
                              params)
        credit[pairs] = est.assign(params, traj, hp, KEY).advantage
        loss[pairs] = est.loss(params, traj, hp, KEY)[0]  # zero-reward pairs masked (default)
    np.testing.assert_allclose(credit["rewarded"], credit["all"], atol=1e-5)
    np.testing.assert_allclose(loss["rewarded"], loss["all"], rtol=1e-5)


def test_future_group_sums_hand_case():
    # Two groups over T = 5, an episode end at t = 2: sums stop there and restart after it.
    v = jnp.array([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [0.0, 4.0], [5.0, 0.0]])
    done = jnp.array([False, False, True, False, False])
    g = CO.future_group_sums(v, done, 0.5)
    # G_0 = v_1 + ½ v_2 (v_3, v_4 are in the next episode); G_1 = v_2; G_2 = 0 (its episode
    # ends at 2); G_3 = v_4; G_4 = 0 (the window ends).
    np.testing.assert_allclose(g, [[1.5, 2.0], [3.0, 0.0], [0.0, 0.0], [5.0, 0.0],
                                   [0.0, 0.0]])


def _random_window(seed, num_steps=11, num_envs=3, values=(0.0, 0.5, 1.0)):
    """Random rewards from ``values``, random states and logits, episode ends of both kinds and
    a non-zero critic (so the bootstrap tails r̃ = r + γ V enter at time-outs and the window's
    end)."""
    key = jax.random.split(jax.random.key(seed), 7)
    shape = (num_steps, num_envs)
    reward = jnp.asarray(values)[jax.random.randint(key[0], shape, 0, len(values))]
    reward = jnp.where(jax.random.bernoulli(key[1], 0.5, shape), reward, 0.0)
    state = jax.random.randint(key[2], shape, 0, 4)
    traj = _hand_trajectory(reward, action=jax.random.randint(key[3], shape, 0, 2), state=state)
    terminated = jax.random.bernoulli(key[4], 0.15, shape)
    truncated = jax.random.bernoulli(key[5], 0.15, shape) & ~terminated
    return traj.replace(logits=jax.random.normal(key[6], shape + (2,)), terminated=terminated,
                        truncated=truncated,
                        next_value=jax.random.normal(key[6], shape))


@pytest.mark.parametrize("model", ["mlp", "hypernet", "tabular"])
def test_grouped_pairs_give_the_all_pairs_credit_and_loss(model):
    hp = Hparams.create(gamma=0.9, lambda_=0.9)
    windows = [_random_window(seed) for seed in range(3)]
    results = {}
    # The grouped sums run chunk by chunk over t (3 does not divide T = 11: a padded chunk),
    # the gradient through rematerialised chunks.
    for pairs, chunk in (("all", 8), ("grouped", 3)):
        for mask in (True, False):
            est = make_estimator("cocoa_reward", reward_values="0,0.5,1", hidden=8,
                                 pairs=pairs, model=model, num_states=4,
                                 mask_zero_reward_loss=mask, chunk=chunk)

            @jax.jit  # one compile for the three windows
            def credit_loss_grad(traj, est=est):
                params = est.init(jax.random.key(4), traj)
                # A non-trivial model: perturb the zero-initialised output layer.
                params = jax.tree.map(
                    lambda p: p + 0.5 * jax.random.normal(jax.random.key(5), p.shape), params)
                loss, grad = jax.value_and_grad(lambda q: est.loss(q, traj, hp, KEY)[0])(params)
                return est.assign(params, traj, hp, KEY).advantage, loss, grad

            for seed, traj in enumerate(windows):
                results[pairs, mask, seed] = credit_loss_grad(traj)
    for seed in range(3):
        credit = {pairs: results[pairs, True, seed][0] for pairs in ("all", "grouped")}
        loss = {(pairs, mask): results[pairs, mask, seed][1]
                for pairs in ("all", "grouped") for mask in (True, False)}
        grad = {(pairs, mask): results[pairs, mask, seed][2]
                for pairs in ("all", "grouped") for mask in (True, False)}
        np.testing.assert_allclose(credit["grouped"], credit["all"], atol=1e-5)
        for mask in (True, False):
            np.testing.assert_allclose(loss["grouped", mask], loss["all", mask], rtol=1e-5)
            jax.tree.map(lambda g, a: np.testing.assert_allclose(g, a, rtol=1e-4, atol=1e-6),
                         grad["grouped", mask], grad["all", mask])


def test_grouped_pairs_with_exact_coefficients_match_all_pairs():
    env, env_params = envs.make("KeyToDoor", length=6)
    truth = gt_lib.make_ground_truth(env, env_params, ("reward_hindsight",))
    mdp = truth.mdp()
    pi = tabular.softmax_policy(jax.random.normal(jax.random.key(1),
                                                  (mdp.num_states, mdp.num_actions)))
    params = gt_lib.exact_model_params("reward_hindsight", truth, mdp, pi, 1.0)
    batch = P.sample_episodes(mdp, pi, jax.random.key(2), 16, 8, truth.reward_values)
    traj = P.episodes_to_trajectory(mdp, pi, batch, jnp.zeros(mdp.num_states))
    credit = {pairs: make_estimator("cocoa_reward", env=env, pairs=pairs, model="oracle")
              .assign(params, traj, HP, KEY).advantage for pairs in ("all", "grouped")}
    np.testing.assert_allclose(credit["grouped"], credit["all"], atol=1e-5)
    # A learned model on coarser values (every reward "0 or 1"): its exact twin still groups
    # the later rewards by the environment's four values (apples, treasure); grouped by the
    # learned model's two, the apples were read as the treasure (credit off by up to 11).
    twin = make_estimator("cocoa_reward", env=env, reward_values="0,1").oracle()
    np.testing.assert_allclose(twin.assign(params, traj, HP, KEY).advantage, credit["all"],
                               atol=1e-5)
    with pytest.raises(ValueError, match="environment's own values"):
        make_estimator("cocoa_reward", env=env, reward_values="0,1", model="oracle")


def test_hypernet_hindsight_hand_cases():
    num_actions = 3
    model = hypernet.hypernet_hindsight(obs_ndim=1, hidden=4)
    obs, u = jnp.ones((1, 2)), jnp.eye(2)[:1]
    params = model.init(jax.random.key(0), obs, num_actions, u)
    pi = jnp.array([0.5, 0.3, 0.2])

    def log_h(gate_plus, pi=pi):
        # ℓ = 0 and G = relu_gate(bias) = gate_plus: the output layers read only their biases.
        p = jax.tree.map(lambda x: x, params)
        inner = dict(p["params"])
        inner["out"] = {"kernel": jnp.zeros_like(inner["out"]["kernel"]),
                        "bias": jnp.zeros_like(inner["out"]["bias"])}
        bias = jnp.concatenate([gate_plus.reshape(-1), jnp.zeros(gate_plus.size)])
        inner["gate"] = {"kernel": jnp.zeros_like(inner["gate"]["kernel"]), "bias": bias}
        p = {"params": inner}
        logits = model.pair_logits(p, model.source(p, obs), model.target(p, u, None),
                                   jnp.log(pi)[None])
        return jax.nn.log_softmax(logits)[0]

    eye = jnp.eye(num_actions)
    zero = jnp.zeros((num_actions, num_actions))
    # G = 0: h = π (the policy's own prediction).
    np.testing.assert_allclose(jnp.exp(log_h(jnp.concatenate([zero, zero], 1))), pi, atol=1e-6)
    # G = [I, 0]: logits 2 log π, h = π² / Σ π² = (0.25, 0.09, 0.04) / 0.38.
    np.testing.assert_allclose(jnp.exp(log_h(jnp.concatenate([eye, zero], 1))),
                               np.array([0.25, 0.09, 0.04]) / 0.38, atol=1e-6)
    # G = [0, I]: logits log π + log(1 − π), h ∝ π(1 − π) = (0.25, 0.21, 0.16) / 0.62.
    np.testing.assert_allclose(jnp.exp(log_h(jnp.concatenate([zero, eye], 1))),
                               np.array([0.25, 0.21, 0.16]) / 0.62, atol=1e-6)
    # The same near a deterministic policy, logits (0, −40, −40): π(1 − π) ∝ (2, 1, 1) e^−40,
    # h = (0.5, 0.25, 0.25), though 1 − π_0 rounds to 0 in float32.
    sure = jax.nn.softmax(jnp.array([0.0, -40.0, -40.0]))
    np.testing.assert_allclose(jnp.exp(log_h(jnp.concatenate([zero, eye], 1), sure)),
                               [0.5, 0.25, 0.25], atol=1e-6)
    # relu_gate: relu of the first half minus relu of the second.
    np.testing.assert_allclose(hypernet.relu_gate(jnp.array([1.0, -2.0, 3.0, 0.5])), [-2.0, -0.5])
    # Leaky halves (slope 0.1): (1 − 3, −0.2 − 0.5).
    np.testing.assert_allclose(hypernet.relu_gate(jnp.array([1.0, -2.0, 3.0, 0.5]), 0.1),
                               [-2.0, -0.7])
    # Both halves negative: COCOA's entry is 0 with no gradient (dead); the leaky one is not.
    both_negative = jnp.array([-1.0, -3.0])
    assert float(jax.grad(lambda y: hypernet.relu_gate(y).sum())(both_negative)[0]) == 0.0
    np.testing.assert_allclose(jax.grad(lambda y: hypernet.relu_gate(y, 0.1).sum())(both_negative),
                               [0.1, -0.1])
    # A gradient floor (β = 0.1): COCOA's values, and slope β wherever a half is ≤ 0.
    y = jnp.array([1.0, -2.0, 3.0, 0.5])
    np.testing.assert_allclose(hypernet.relu_gate(y, floor=0.1), [-2.0, -0.5])
    np.testing.assert_allclose(jax.grad(lambda v: hypernet.relu_gate(v, floor=0.1).sum())(y),
                               [1.0, 0.1, -1.0, -1.0])
    np.testing.assert_allclose(
        jax.grad(lambda v: hypernet.relu_gate(v, floor=0.1).sum())(both_negative), [0.1, -0.1])


def test_gate_leak_reaches_the_hypernet_and_is_checked():
    traj = _random_window(0)
    hp = Hparams.create(gamma=0.9, lambda_=0.9)
    est = {leak: make_estimator("cocoa_reward", reward_values="0,0.5,1", model="hypernet",
                                hidden=8, gate_leak=leak) for leak in (0.0, 0.2)}
    params = est[0.0].init(jax.random.key(4), traj)
    credit = {leak: e.assign(params, traj, hp, KEY).advantage for leak, e in est.items()}
    assert float(jnp.abs(credit[0.0] - credit[0.2]).max()) > 1e-4
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="gate_leak"):
            make_estimator("cocoa_reward", reward_values="0,1", model="hypernet", gate_leak=bad)
    with pytest.raises(ValueError, match="hypernet"):
        make_estimator("cocoa_reward", reward_values="0,1", gate_leak=0.1)


def test_gate_floor_keeps_the_credit_and_changes_only_the_gradient():
    traj = _random_window(0)
    hp = Hparams.create(gamma=0.9, lambda_=0.9)
    est = {floor: make_estimator("cocoa_reward", reward_values="0,0.5,1", model="hypernet",
                                 hidden=8, gate_floor=floor) for floor in (0.0, 0.2)}
    params = est[0.0].init(jax.random.key(4), traj)
    credit = {f: e.assign(params, traj, hp, KEY).advantage for f, e in est.items()}
    np.testing.assert_allclose(credit[0.2], credit[0.0], rtol=1e-6, atol=1e-7)
    grads = {f: jax.grad(lambda p, e=e: e.loss(p, traj, hp, KEY)[0])(params)
             for f, e in est.items()}
    gate = {f: g["params"]["gate"]["kernel"] for f, g in grads.items()}
    assert float(jnp.abs(gate[0.2] - gate[0.0]).max()) > 1e-6
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="gate_floor"):
            make_estimator("cocoa_reward", reward_values="0,1", model="hypernet", gate_floor=bad)
    with pytest.raises(ValueError, match="alternatives"):
        make_estimator("cocoa_reward", reward_values="0,1", model="hypernet", gate_leak=0.1,
                       gate_floor=0.1)


def test_grouped_pairs_need_an_object_with_values():
    with pytest.raises(ValueError, match="grouped"):
        make_estimator("hca_state", pairs="grouped")
    with pytest.raises(ValueError, match="grouped"):
        make_estimator("cocoa_feature", pairs="grouped")


# ---------------------------------------------------------------------------------------------
# 2. Exact reward hindsight against Monte-Carlo pair counts
# ---------------------------------------------------------------------------------------------


def test_reward_hindsight_matches_pair_counts_on_tree_mdp():
    env, params = envs.make("TreeMDP", state_overlap=3)
    mdp = env.tabular_mdp(params)
    values, probs = gt_lib.reward_value_law(env, params)
    pi = tabular.softmax_policy(0.8 * jax.random.normal(jax.random.key(3),
                                                        (mdp.num_states, mdp.num_actions)))
    h = np.asarray(hindsight.reward_hindsight(mdp, pi, 1.0, probs))

    @jax.jit
    def sample(key):
        batch = P.sample_episodes(mdp, pi, key, 40_000, 4, (values, probs))
        return batch.state, batch.action, C.reward_index(batch.reward, values), batch.valid

    s, a, u, valid = map(np.asarray, sample(jax.random.key(4)))
    counts = np.zeros(h.shape)
    for t in range(4):
        for k in range(t + 1, 4):
            ok = valid[t] & valid[k]
            np.add.at(counts, (s[t][ok], u[k][ok], a[t][ok]), 1.0)
    total = counts.sum(-1, keepdims=True)
    seen = total[..., 0] >= 3000
    assert seen.sum() >= 10
    np.testing.assert_allclose((counts / np.maximum(total, 1))[seen], h[seen], atol=0.03)


# ---------------------------------------------------------------------------------------------
# 3. Unbiased with exact coefficients; less variance than HCA+; fitted close to exact
# ---------------------------------------------------------------------------------------------


# The two tasks of the checks below, and one diagnose run of each shared by both tests (the file
# runs on one worker, so the second test reuses the first's run).
COCOA_TASKS = {"TreeMDP": (("state_overlap", 3),), "KeyToDoor": (("length", 6),)}


@functools.lru_cache(maxsize=None)
def _diagnose_cocoa(env):
    config = D.DiagnoseConfig(
        env=env, env_kwargs=COCOA_TASKS[env],
        estimators=("cocoa_reward:model=oracle", "hca_state:model=oracle", "reinforce",
                    "cocoa_reward"),
        num_trajectories=4096, num_fit=512, fit_steps=150, gamma=1.0)
    return D.diagnose(config, seed=2, policy_scale=0.5)


@pytest.mark.parametrize("env", list(COCOA_TASKS))
def test_cocoa_with_exact_coefficients_is_unbiased_and_beats_hca_plus(env):
    r = _diagnose_cocoa(env)
    exact = r["cocoa_reward:model=oracle"]
    assert float(exact["bias_db"]) < float(exact["floor_db"]) + 6.0
    assert float(exact["cosine"]) > 0.99
    # COCOA's claim: conditioning on the reward removes the spurious contributions of states.
    assert float(exact["var_db"]) < float(r["hca_state:model=oracle"]["var_db"]) - 1.0
    assert float(exact["var_db"]) < float(r["reinforce"]["var_db"]) - 1.0


# Measured (seed 2, policy scale 0.5, 512 fitting episodes, 150 Adam steps), with the KL of the
# unfitted model h = π (fit_steps=0: the zero last layer of the policy-modulated MLP) beside it:
#   KeyToDoor-6:       fitted 0.042, unfitted 0.127.
#   TreeMDP overlap 3: fitted 0.130, unfitted 0.033; 30 steps 0.040, 300 steps 0.234; with 4096
#                      fitting episodes (150 steps) 0.015.
# The bound is a little above half the unfitted KL in both tasks: fitting has to bring the model
# well towards the exact one, not merely keep it near h = π.
TREE_OVERFIT = ("known overfit: on 512 episodes of TreeMDP (overlap 3, 95 states) the fitted "
                "MLP's KL to the exact hindsight is 0.130 after 150 steps (0.234 after 300), "
                "four times the unfitted h = pi's 0.033; 4096 episodes give 0.015")


@pytest.mark.parametrize("env, max_kl", [
    pytest.param("TreeMDP", 0.02, marks=pytest.mark.xfail(strict=True, reason=TREE_OVERFIT)),
    ("KeyToDoor", 0.07)])
def test_fitted_cocoa_model_is_close_to_the_exact_one(env, max_kl):
    # Where the model is used: the pairs with r_k ≠ 0 of the evaluation batch.
    kl = float(_diagnose_cocoa(env)["cocoa_reward"]["kl_to_exact"])
    assert kl < max_kl, f"{env}: KL of the fitted model to the exact one {kl:.4f} >= {max_kl}"


# ---------------------------------------------------------------------------------------------
# 4. The engine, and bad options
# ---------------------------------------------------------------------------------------------


def test_cocoa_reward_trains_in_the_engine_with_the_kl_metric():
    # tests/test_every_part.py's cocoa_reward program (the same config and
    # conftest.init_and_train, hyper-parameters as arguments), which the session's compile cache
    # holds once for the files that run it.
    for estimator, options in (("cocoa_reward", ()),):
        config = TrainConfig.from_flat(algo="a2c", env="KeyToDoor", env_options=(("length", 6),),
                                       estimator=estimator, estimator_options=options, num_envs=4,
                                       num_steps=6, total_timesteps=4 * 6 * 2, eval_every=2,
                                       eval_episodes=2, hidden_sizes=(8,), num_minibatches=1,
                                       update_epochs=1)
        engine = make_engine(config)
        hparams = Hparams.create(gamma=1.0, lambda_=0.9)
        _, (state, metrics) = jax.jit(init_and_train, static_argnums=0)(engine, KEY, hparams)
        names = set(metrics)
        for name, values in metrics.items():
            values = np.asarray(values)
            # Evaluation metrics (the KL and the credit error too) sit at evaluation points,
            # NaN elsewhere.
            sparse = (name.startswith("eval/") or name.endswith("kl_to_exact")
                      or name.split("/")[-1] in CREDIT_ERROR_NAMES)
            # The sign agreement is read only where the exact credit is not 0 (at the key, in
            # episodes that reach the treasure): a tiny run may have no such step.
            undefined = name.endswith(("sign_agreement", "sign_zero"))
            assert (np.all(np.isfinite(values)) or undefined
                    or (sparse and np.any(np.isfinite(values)))), (estimator, name)
        if estimator == "cocoa_reward" and not options:
            assert "estimator/kl_to_exact" in names
            assert "estimator/hindsight_loss" in names


def test_feature_model_learns_to_separate_reward_values():
    """Fitted on a fixed KeyToDoor batch, the features predict the reward of (s_k, a_k) and the
    whole loss (hindsight + features) decreases."""
    env, params = envs.make("KeyToDoor", length=8)
    mdp = env.tabular_mdp(params)
    values, probs = gt_lib.reward_value_law(env, params)
    pi = tabular.uniform_policy(mdp)

    @jax.jit
    def episodes(key):
        batch = P.sample_episodes(mdp, pi, key, 256, 8, (values, probs))
        traj = P.episodes_to_trajectory(mdp, pi, batch, tabular.state_values(mdp, pi, 1.0))
        return traj.replace(obs=mdp.observation[batch.state])  # the environment's observation

    traj = episodes(jax.random.key(5))
    est = make_estimator("cocoa_feature", num_features=16, hidden=16)
    loss = jax.jit(lambda p: est.loss(p, traj, HP, KEY))
    p0 = est.init(jax.random.key(6), traj)
    loss0, metrics0 = loss(p0)
    fitted, _ = jax.jit(lambda p: P.fit_hindsight(est, p, traj, HP, 300, 0.01,
                                                  jax.random.key(7)))(p0)
    loss1, metrics1 = loss(fitted)
    # Both parts fall: the hindsight cross-entropy from ln 4 (h = π, uniform over 4 actions) by
    # 16 % (1.386 -> 1.16-1.17 measured at LLVM levels 0 and 1), and the
    # whole loss with it by 20 %.
    assert float(metrics1["hindsight_loss"]) < 0.9 * float(metrics0["hindsight_loss"])
    assert float(loss1) < 0.85 * float(loss0)
    # The reward variance is that of the apples (½·(0.8·23/8)² ≈ 0.26 of their steps): the
    # regression explains most of what (s, a) can explain.
    assert float(metrics1["feature_loss"]) < 0.5 * float(metrics0["feature_loss"])
    obj = C.feature_object(16, 0.05, 1e-3, 1e-3)
    features = obj.apply(fitted["object"], traj.replace(obs=traj.obs))
    assert set(np.unique(np.asarray(features))) <= {0.0, 1.0}


def test_bad_options_are_one_line_errors():
    with pytest.raises(ValueError, match="reward_values"):
        make_estimator("cocoa_reward")  # no environment, no values
    with pytest.raises(ValueError, match="numbers separated by commas"):
        make_estimator("cocoa_reward", reward_values="0,a")
    env, params = envs.make("AmbiguousBandit")
    with pytest.raises(ValueError, match="not a finite set"):
        make_estimator("cocoa_reward", env=env, env_params=params)
    with pytest.raises(ValueError, match="num_features"):
        make_estimator("cocoa_feature", num_features=0)
    with pytest.raises(ValueError, match="model"):
        make_estimator("cocoa_reward", reward_values="0,1", model="table")
    for name, options in (("cocoa_reward", {"reward_values": "0,1"}), ("cocoa_feature", {})):
        with pytest.raises(ValueError, match="modulated by the policy by design"):  # COCOA's
            make_estimator(name, model="hypernet", policy_modulated=False, **options)
    # From the environment: KeyToDoor's four values (0, two apples, the treasure).
    env, params = envs.make("KeyToDoor", length=23)
    est = make_estimator("cocoa_reward", env=env, env_params=params)
    assert est.exact_model == "reward_hindsight" and est.oracle().is_oracle


def test_start_at_policy_gives_h_equal_to_pi_and_learns_through_the_floor():
    traj = _random_window(0)
    hp = Hparams.create(gamma=0.9, lambda_=0.9)
    est = make_estimator("cocoa_reward", reward_values="0,0.5,1", model="hypernet", hidden=8,
                         gate_floor=0.1, start_at_policy=True)
    params = est.init(jax.random.key(4), traj)
    log_h, _ = est.hindsight(params, traj, hp, KEY)
    log_pi = jax.nn.log_softmax(traj.logits, axis=-1)
    # h(·|s_t, u_k) = π(·|s_t) at every sampled pair ([N, T, K, A]): every w = h/π is 1.
    log_pi = jnp.swapaxes(log_pi, 0, 1)[:, :, None]
    np.testing.assert_allclose(jnp.exp(log_h), jnp.exp(jnp.broadcast_to(log_pi, log_h.shape)),
                               atol=1e-6)
    grad = jax.grad(lambda p: est.loss(p, traj, hp, KEY)[0])(params)
    assert float(jnp.abs(grad["params"]["gate"]["kernel"]).max()) > 0  # the floor passes it
    with pytest.raises(ValueError, match="start_at_policy needs"):
        make_estimator("cocoa_reward", reward_values="0,1", model="hypernet",
                       start_at_policy=True)


def test_the_feature_pretraining_summary_gives_the_loss_and_gradient_of_every_step():
    """COCOA-feature's pretraining reads the distinct (observation, action) pairs with their
    counts, mean rewards and the rewards' spread: the same loss and gradient as the mean over
    every step (6 distinct observations × 3 actions among 200 steps, rewards random per step).
    A bound smaller than the distinct pairs makes the loss NaN instead of fitting part of the
    data."""
    k = jax.random.split(jax.random.key(31), 5)
    rows = jax.random.bernoulli(k[0], 0.5, (6, 5)).astype(jnp.float32)
    obs = rows[jax.random.randint(k[1], (40, 5), 0, 6)]
    action = jax.random.randint(k[2], (40, 5), 0, 3)
    reward = jax.random.choice(k[3], jnp.array([0.0, 0.1, 0.9]), (40, 5))
    tr = Trajectory(obs=obs, action=action, reward=reward, terminated=jnp.zeros((40, 5), bool),
                    truncated=jnp.zeros((40, 5), bool), value=jnp.zeros((40, 5)),
                    next_value=jnp.zeros((40, 5)), log_prob=jnp.zeros((40, 5)),
                    logits=jnp.zeros((40, 5, 3)))
    obj = C.feature_object(16, 0.05, 1e-3, 1e-3, max_distinct=18)
    params = obj.init(k[4], tr)
    params["readout"] = jax.random.normal(k[4], params["readout"].shape)
    (value, metrics), grad = jax.value_and_grad(obj.loss, has_aux=True)(params, tr)
    summary = obj.summarise(tr)
    assert int((summary["weight"] > 0).sum()) == len({(tuple(np.asarray(o)), int(a)) for o, a in
                                                      zip(obs.reshape(-1, 5), action.reshape(-1))})
    (got, got_metrics), got_grad = jax.value_and_grad(obj.summary_loss, has_aux=True)(
        params, summary)
    assert float(metrics["feature_loss"]) > 0.01
    np.testing.assert_allclose(got, value, rtol=1e-5)
    np.testing.assert_allclose(got_metrics["features_active"], metrics["features_active"],
                               rtol=1e-5)
    for name in ("gate", "readout", "bias"):
        np.testing.assert_allclose(got_grad[name], grad[name], rtol=1e-4, atol=1e-7)
    small = C.feature_object(16, 0.05, 1e-3, 1e-3, max_distinct=4)
    assert np.isnan(float(small.summary_loss(params, small.summarise(tr))[0]))
    # The engine's estimator gets the bound from a tabular environment, and none without one.
    env, env_params = envs.make("KeyToDoor", length=8)
    assert make_estimator("cocoa_feature", env=env, env_params=env_params,
                          features="pretrain").pretrain_data is not None
    assert make_estimator("cocoa_feature", features="pretrain").pretrain_data is None
    # Nor from one whose observations are not a function of its state (GridWorld's time
    # feature: 676 distinct observation-action pairs in 800 random steps, 200 state-action
    # pairs), which would overflow the bound and make the pretraining NaN.
    grid, grid_params = envs.make("GridWorld-v1")
    assert make_estimator("cocoa_feature", env=grid, env_params=grid_params,
                          features="pretrain").pretrain_data is None
