"""ArithmeticChain, the outcome / process reward models, best-of-N and the prm stage."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit import cli, runlog
from jaxcredit.envs import arithmetic_chain as ac
from jaxcredit.envs import registry
from jaxcredit.envs.goals import success_fn
from jaxcredit.redistribute import make_redistributor
from jaxcredit.reward_models import best_of_n, models
from jaxcredit.types import Trajectory


def _python_labels(start, ops, operands, written, modulus):
    """Plain-Python reference: true chain, labels, final correctness."""
    f = {0: lambda v, c: (v + c) % modulus, 1: lambda v, c: (v - c) % modulus,
         2: lambda v, c: (v * c) % modulus}
    x, labels, wrong = start, [], False
    for o, c, y in zip(ops, operands, written):
        x = f[o](x, c)
        if wrong:
            labels.append(ac.AFTER_ERROR)
        elif y == x:
            labels.append(ac.CORRECT)
        else:
            labels.append(ac.FIRST_ERROR)
            wrong = True
    return labels, written[-1] == x


def _env(**kwargs):
    env, params = registry.make("ArithmeticChain", **kwargs)
    return env, params


# ------------------------------------------------------------------ environment


def test_hand_case_labels_and_rewards():
    # x0 = 3, ops (+2, ×4, −1) mod 7: true chain 5, 6, 5.
    start, op, operand = 3, jnp.array([0, 2, 1]), jnp.array([2, 4, 1])
    assert ac.chain_values(start, op, operand, 7).tolist() == [5, 6, 5]
    # Right, wrong (4 instead of 6), then consistent with the wrong value (4 − 1 = 3).
    written = jnp.array([5, 4, 3])
    assert ac.step_labels(start, op, operand, written, 7).tolist() == [0, 1, 2]
    assert ac.step_consistent(start, op, operand, written, 7).tolist() == [True, False, True]
    assert not bool(ac.final_correct(start, op, operand, written, 7))
    # Lucky: wrong step 2, final answer right anyway.
    lucky = jnp.array([5, 0, 5])
    assert ac.step_labels(start, op, operand, lucky, 7).tolist() == [0, 1, 2]
    assert bool(ac.final_correct(start, op, operand, lucky, 7))


def test_miscalibrated_labellers_on_hand_cases():
    # x0 = 3, ops (+2, ×4, −1) mod 7; the × step maps 5 to 6, read as + it maps 5 to 2.
    start, op, operand = 3, jnp.array([0, 2, 1]), jnp.array([2, 4, 1])
    as_add = jnp.array([5, 2, 1])       # 5 + 4 = 2: what mul_as_add expects at the × step
    right = jnp.array([5, 6, 5])
    garbage = jnp.array([5, 3, 2])      # the × step is neither
    check = lambda w, m: ac.step_consistent(start, op, operand, w, 7, m).tolist()  # noqa: E731
    assert check(as_add, "none") == [True, False, True]
    assert check(as_add, "mul_as_add") == [True, True, True]
    # The right product is "wrong" to mul_as_add, and its process labels stop there.
    assert check(right, "mul_as_add") == [True, False, True]
    assert ac.labels_from_consistency(jnp.array([True, False, True])).tolist() == [0, 1, 2]
    assert check(garbage, "trust_mul") == [True, True, True]
    assert check(garbage, "none") == [True, False, True]
    assert check(right, "trust_mul") == [True, True, True]
    with pytest.raises(ValueError, match="miscalibration"):
        ac.step_consistent(start, op, operand, right, 7, "sloppy")


def test_labels_match_a_python_checker_on_random_problems():
    env, _ = _env(steps=5, modulus=6)
    key = jax.random.PRNGKey(0)
    start, op, operand = jax.vmap(env.sample_problem)(jax.random.split(key, 300))
    # Half random writers, half near-correct ones, so every label kind occurs.
    truth = ac.chain_values(start, op, operand, 6)
    noise = jax.random.randint(jax.random.PRNGKey(1), truth.shape, 0, 6)
    flip = jax.random.bernoulli(jax.random.PRNGKey(2), 0.3, truth.shape)
    written = jnp.where(flip, noise, truth)
    labels = np.asarray(ac.step_labels(start, op, operand, written, 6))
    correct = np.asarray(ac.final_correct(start, op, operand, written, 6))
    start, op, operand, written = (np.asarray(x).tolist() for x in (start, op, operand, written))
    for i in range(300):
        ref, ok = _python_labels(start[i], op[i], operand[i], written[i], 6)
        assert labels[i].tolist() == ref
        assert correct[i] == ok
    assert {0, 1, 2} <= set(labels.ravel().tolist())


def test_episode_rewards_termination_and_success():
    env, params = _env(steps=3, modulus=7)
    _, state = env.reset(jax.random.PRNGKey(0), params)
    state = state.replace(start=jnp.int32(3), op=jnp.array([0, 2, 1]),
                          operand=jnp.array([2, 4, 1]))
    succeed = success_fn(env)
    obs = env.get_obs(state)
    for t, action in enumerate([5, 6, 5]):
        decoded = env.decode(obs)
        assert int(decoded["time"]) == t
        obs2, state, reward, done, info = env.step_env(None, state, action, params)
        assert bool(done) == (t == 2) and not bool(env.is_truncated(state, params))
        assert float(reward) == (1.0 if t == 2 else 0.0)
        assert bool(succeed(obs, obs2, reward)) == (t == 2)
        obs = obs2
    assert env.decode(obs)["written"].tolist() == [5, 6, 5]
    # The step labels in info: right, wrong (4 ≠ 6), after the error.
    _, state = env.reset(jax.random.PRNGKey(0), params)
    state = state.replace(start=jnp.int32(3), op=jnp.array([0, 2, 1]),
                          operand=jnp.array([2, 4, 1]))
    seen = []
    for action in [5, 4, 3]:
        _, state, _, _, info = env.step_env(None, state, action, params)
        seen.append(int(info["step_label"]))
    assert seen == [ac.CORRECT, ac.FIRST_ERROR, ac.AFTER_ERROR]
    hacked, _ = _env(steps=3, modulus=7, grader="parity")
    state = state.replace(written=jnp.array([5, 6, -1]), time=2)
    obs = hacked.get_obs(state)
    obs2, _, reward, _, info = hacked.step_env(None, state, 4, params)   # even, wrong
    assert float(reward) == 1.0 and not bool(info["is_success"])
    assert not bool(success_fn(hacked)(obs, obs2, reward))


def test_decode_inverts_get_obs_and_judgement_matches_labels():
    env, params = _env(steps=4, modulus=5)
    key = jax.random.PRNGKey(3)
    start, op, operand = jax.vmap(env.sample_problem)(jax.random.split(key, 64))
    written = jax.random.randint(jax.random.PRNGKey(4), (64, 4), 0, 5)
    obs, action = ac.solution_steps(env, start, op, operand, written)
    assert obs.shape == (64, 4, env.obs_size)
    d = env.decode(obs)
    assert (d["start"] == start[:, None]).all() and (d["op"] == op[:, None]).all()
    assert (d["time"] == jnp.arange(4)).all()
    shown = jnp.where(jnp.arange(4)[None, :, None] > jnp.arange(4)[None, None, :], written[:, None],
                      -1)
    assert (d["written"] == shown).all()
    # The current line the policy reads first: one-hot y_t (x_0 at t = 0), op_t, c_t.
    prev = ac.previous_values(start, written)
    m, n = 5, len(ac.OPS)
    assert (jnp.argmax(obs[..., :m], -1) == prev).all()
    assert (jnp.argmax(obs[..., m:m + n], -1) == op).all()
    assert (jnp.argmax(obs[..., m + n:2 * m + n], -1) == operand).all()
    labels = ac.step_labels(start, op, operand, written, 5)
    assert (env.step_label(obs, action) == labels).all()
    for miscalibration in ac.MISCALIBRATIONS:
        judged = ac.step_consistent(start, op, operand, written, 5, miscalibration)
        here, before = env.step_judgement(obs, action, miscalibration)
        assert (here == judged).all()
        first_ok = jnp.cumprod(jnp.concatenate([jnp.ones((64, 1), bool), judged[:, :-1]], 1), 1)
        assert (before == (first_ok > 0)).all()


def test_random_writer_rates_match_closed_form():
    env, params = _env(steps=3, modulus=5)
    rates = ac.random_writer_rates(env)
    assert rates["lucky"] == pytest.approx(1 / 5 - 5 ** -3)
    n = 200_000
    start, op, operand = jax.vmap(env.sample_problem)(jax.random.split(jax.random.PRNGKey(5), n))
    written = jax.random.randint(jax.random.PRNGKey(6), (n, 3), 0, 5)
    labels = ac.step_labels(start, op, operand, written, 5)
    success = ac.final_correct(start, op, operand, written, 5)
    lucky = float((success & (labels != ac.CORRECT).any(-1)).mean())
    assert abs(float(success.mean()) - rates["success"]) < 4 * np.sqrt(0.2 * 0.8 / n)
    assert abs(lucky - rates["lucky"]) < 4 * np.sqrt(rates["lucky"] / n)


def test_noisy_solver_rates_match_monte_carlo():
    env, _ = _env(steps=4, modulus=7)
    slip = [0.1, 0.2, 0.5]
    exact = ac.noisy_solver_rates(env, slip)
    start, op, operand, written = ac.sample_solutions(
        jax.random.PRNGKey(7), env, ac.slip_rates_array(env, slip), 50_000, 4)
    labels = ac.step_labels(start[:, None], op[:, None], operand[:, None], written, 7)
    success = ac.final_correct(start[:, None], op[:, None], operand[:, None], written, 7)
    n = success.size
    for name, value in (("success", success.mean()),
                        ("all_correct", (labels == ac.CORRECT).all(-1).mean()),
                        ("lucky", (success & (labels != ac.CORRECT).any(-1)).mean())):
        p = exact[name]
        # Solutions of one problem are correlated: 4 per problem, so a generous 6 σ.
        assert abs(float(value) - p) < 6 * np.sqrt(p * (1 - p) / (n / 4)), name
    assert 0.0 < exact["lucky"] < exact["success"]


def test_noisy_solver_slips_are_the_stated_misconceptions():
    env, _ = _env(steps=1, modulus=11, ops="*")
    start, op, operand = jnp.full((4000,), 3), jnp.full((4000, 1), 2), jnp.full((4000, 1), 5)
    keys = jax.random.split(jax.random.PRNGKey(8), 4000)
    solve = jax.vmap(ac.noisy_solver, (0, None, 0, 0, 0, None))
    written = np.asarray(solve(keys, env, start, op, operand, jnp.array([0.0, 0.0, 1.0])))[:, 0]
    values, counts = np.unique(written, return_counts=True)
    share = dict(zip(values.tolist(), (counts / 4000).tolist()))
    # 3 × 5 = 15 = 4 (mod 11) is never written; 3 + 5 = 8 three times in four; 4 ± 1 the rest.
    assert set(share) == {8, 3, 5}
    assert share[8] == pytest.approx(0.75, abs=0.03)
    assert share[3] == pytest.approx(0.125, abs=0.02)


def test_bad_environment_options_are_one_line_errors():
    for kwargs, match in (({"modulus": 1}, "modulus"), ({"ops": "+/"}, "ops"),
                          ({"grader": "vibes"}, "grader"), ({"steps": 0}, "steps")):
        with pytest.raises(ValueError, match=match):
            registry.make("ArithmeticChain", **kwargs)


# ------------------------------------------------------------------ reward models


def test_aggregation_and_targets_on_hand_cases():
    p = jnp.array([0.9, 0.5, 0.8])
    assert float(models.aggregate(p, "product")) == pytest.approx(0.36)
    assert float(models.aggregate(p, "min")) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="aggregation"):
        models.aggregate(p, "mean")
    env, _ = _env(steps=3, modulus=7)
    data = ac.grade_solutions(env, jnp.array([3, 3]), jnp.array([[0, 2, 1]] * 2),
                                  jnp.array([[2, 4, 1]] * 2), jnp.array([[5, 4, 3], [5, 0, 5]]))
    target, mask = models.targets("prm", data)
    assert target.tolist() == [[1, 0, 1], [1, 0, 0]]
    assert mask.tolist() == [[1, 1, 0], [1, 1, 0]]       # labels stop after the first error
    target, mask = models.targets("orm", data)
    assert target.tolist() == [[0, 0, 0], [1, 1, 1]]     # the lucky guess is a positive
    assert mask.tolist() == [[1] * 3] * 2
    assert data.answer.tolist() == [3, 5] and data.correct.tolist() == [False, True]


def test_prm_learns_the_labeller_it_is_trained_on():
    env, _ = _env(steps=3, modulus=5)
    slip = ac.slip_rates_array(env, [0.2, 0.2, 0.5])
    train = ac.sample_solutions(jax.random.PRNGKey(9), env, slip, 3000, 4)
    test = ac.sample_solutions(jax.random.PRNGKey(10), env, slip, 500, 4)
    scorer = models.StepScorer(5, (64, 64))
    fit = jax.jit(models.fit, static_argnums=(1, 2, 4, 5))
    exact_test = ac.grade_solutions(env, *test)
    for miscalibration in ("none", "mul_as_add"):
        params, losses = fit(jax.random.PRNGKey(11), scorer, "prm",
                             ac.grade_solutions(env, *train, miscalibration=miscalibration),
                             500, 256, 3e-3)
        assert float(losses[-50:].mean()) < 0.5 * float(losses[:50].mean())
        own = ac.grade_solutions(env, *test, miscalibration=miscalibration)
        acc = models.step_accuracy(scorer, params, own, exact_test)
        assert float(acc["labelled_accuracy"]) > 0.95, miscalibration
        if miscalibration == "none":
            assert float(acc["exact_accuracy"]) > 0.95
        else:
            # It learned the bias: on the solver's × misconceptions (× read as +) it says "right".
            mul_slip = (exact_test.labelled & ~exact_test.consistent & own.consistent)
            said = models.step_logits(scorer, params, exact_test.obs, exact_test.action) > 0
            assert int(mul_slip.sum()) > 20
            assert float((said & mul_slip).sum() / mul_slip.sum()) > 0.9


# ------------------------------------------------------------------ best of N


def test_best_of_n_selection_on_a_hand_case():
    # One problem, a pool of 4: answers 1, 2, 2, 3; the right answer is 1 (solution 0).
    correct = jnp.array([[True, False, False, False]])
    answers = jnp.array([[1, 2, 2, 3]])
    scores = {"good": jnp.array([[0.9, 0.1, 0.2, 0.3]]), "bad": jnp.array([[0.1, 0.9, 0.2, 0.3]])}
    curves = best_of_n.accuracy_curves(jax.random.PRNGKey(0), correct, answers, jnp.array([1]),
                                       scores, [1, 4], num_answers=4, repeats=4000)
    # N = 4: the whole pool; a score picks its best, majority picks 2 (wrong), pass@4 = 1.
    assert curves["good"][1, 0] == 1.0 and curves["bad"][1, 0] == 0.0
    assert curves["majority"][1, 0] == 0.0 and curves["pass@N"][1, 0] == 1.0
    # N = 1: every rule returns a uniformly random solution: 1/4 right.
    for name in ("good", "bad", "majority", "pass@N"):
        assert curves[name][0, 0] == pytest.approx(0.25, abs=0.03)
    # Ties in the vote are broken at random: answers 1, 2 once each -> right half the time.
    tie = best_of_n.majority_answer(jax.random.PRNGKey(1), jnp.array([[1, 2]] * 4000),
                                    jnp.zeros((4000, 1, 2), jnp.int32) + jnp.array([0, 1]), 4)
    assert float((tie == 1).mean()) == pytest.approx(0.5, abs=0.03)
    # Equal scores: each solution is picked with probability 1/4, also over the whole pool.
    flat = {"flat": jnp.zeros((1, 4))}
    curves = best_of_n.accuracy_curves(jax.random.PRNGKey(2), correct, answers, jnp.array([1]),
                                       flat, [2, 4], num_answers=4, repeats=4000)
    assert curves["flat"][0, 0] == pytest.approx(0.25, abs=0.03)
    assert curves["flat"][1, 0] == pytest.approx(0.25)
    # The whole-pool vote between tied answers: 1 and 2 twice each, 1 right -> 1/2.
    tied = best_of_n.whole_pool_majority(jnp.array([[1, 2, 2, 1]]), jnp.array([1]), 4)
    assert float(tied[0]) == 0.5
    with pytest.raises(ValueError, match="pool size"):
        best_of_n.accuracy_curves(jax.random.PRNGKey(0), correct, answers, jnp.array([1]),
                                  scores, [8], num_answers=4)


def test_auroc_on_hand_cases():
    correct = np.array([True, False, True, False])
    assert best_of_n.auroc(np.array([0.9, 0.1, 0.8, 0.2]), correct) == 1.0
    assert best_of_n.auroc(np.array([0.1, 0.9, 0.2, 0.8]), correct) == 0.0
    assert best_of_n.auroc(np.ones(4), correct) == 0.5
    # One of the four (right, wrong) pairs is ordered wrongly.
    assert best_of_n.auroc(np.array([0.9, 0.5, 0.4, 0.1]), correct) == 0.75
    assert np.isnan(best_of_n.auroc(np.ones(2), np.array([True, True])))


def test_bootstrap_over_problems():
    per_problem = np.array([[0.0, 1.0] * 50])
    mean, low, high = best_of_n.bootstrap_over_problems(per_problem)
    assert mean[0] == 0.5 and low[0] < 0.5 < high[0] and high[0] - low[0] < 0.3


# ------------------------------------------------------------------ the prm stage


def _window(env, written, reward):
    """A [K, 1] window of one episode with the given writes."""
    start, op, operand = jnp.array([3]), jnp.array([[0, 2, 1]]), jnp.array([[2, 4, 1]])
    obs, action = ac.solution_steps(env, start, op, operand, jnp.array([written]))
    k = env.steps
    zeros = jnp.zeros((k, 1))
    done = jnp.arange(k)[:, None] == k - 1
    return Trajectory(obs=jnp.swapaxes(obs, 0, 1), action=action.T, reward=reward,
                      terminated=done, truncated=zeros.astype(bool), value=zeros,
                      next_value=zeros, log_prob=zeros, logits=jnp.zeros((k, 1, 7)))


def test_prm_oracle_step_rewards_on_a_hand_window():
    env, _ = _env(steps=3, modulus=7)
    # Right, wrong, consistent after the error; outcome 0.
    traj = _window(env, [5, 4, 3], jnp.zeros((3, 1)))
    stage = make_redistributor("prm", model="oracle", env=env)
    new, _, metrics = stage.redistribute({}, traj, jax.random.PRNGKey(0), None)
    np.testing.assert_allclose(new.reward[:, 0], [0.0, -1 / 3, 0.0])
    assert float(metrics["correct_step_rate"]) == pytest.approx(1 / 3)     # labels ✓ ✗ ·
    assert float(metrics["consistent_step_rate"]) == pytest.approx(2 / 3)  # 4 − 1 = 3 follows
    # mul_as_add: the × read as + (5 + 4 = 2) is rewarded, the right product 6 is punished.
    biased = make_redistributor("prm", model="oracle", labeller="mul_as_add", env=env)
    new, _, metrics = biased.redistribute(
        {}, _window(env, [5, 6, 5], jnp.array([[0.], [0.], [1.]])), None, None)
    np.testing.assert_allclose(new.reward[:, 0], [0.0, -1 / 3, 0.0])
    assert float(metrics["grader_accuracy"]) == pytest.approx(2 / 3)
    keep = make_redistributor("prm", model="oracle", outcome="keep", env=env)
    new, _, _ = keep.redistribute({}, _window(env, [5, 6, 5], jnp.array([[0.], [0.], [1.]])),
                                  None, None)
    np.testing.assert_allclose(new.reward[:, 0], [0.0, 0.0, 1.0])


def test_prm_stage_errors_are_one_line():
    env, _ = _env(steps=3, modulus=7)
    cartpole, _ = registry.make("CartPole-v1")
    for kwargs, match in (({"env": cartpole}, "ArithmeticChain"),
                          ({"env": env, "labeller": "lazy"}, "labeller"),
                          ({"env": env, "outcome": "both"}, "outcome"),
                          ({"env": env, "model": "magic"}, "model"),
                          ({"env": env, "hidden": "wide"}, "hidden"),
                          ({"env": env, "slip": 2.0}, "slip"),
                          ({"env": env, "pretrain_problems": 0}, "pretrain_problems")):
        with pytest.raises(ValueError, match=match) as error:
            make_redistributor("prm", **kwargs)
        assert "\n" not in str(error.value)


def test_train_with_the_prm_stage_reports_truth_and_proxy(tmp_path):
    """A fitted PRM, refitted every update, with the outcome kept under the hacked grader: the
    stage's metrics are reported, the evaluation return is the parity grader's pass rate, the
    success rate is the truth, and the two differ."""
    out = tmp_path / "prm"
    assert cli.main(["train", "--env", "ArithmeticChain", "--env-option", "steps=3", "modulus=5",
                     "grader=parity", "--redistribute", "prm", "--redistribute-option",
                     "outcome=keep", "pretrain_steps=20", "pretrain_problems=64", "hidden=32,32",
                     "--num-envs", "8", "--num-steps", "6", "--total-timesteps", "192",
                     "--eval-every", "2", "--eval-episodes", "16", "--no-progress",
                     "--out", str(out)]) == 0
    rows = runlog.read_rows(out / "metrics.csv")
    assert len(rows) == 4
    for name in ("redistribute/step_score", "redistribute/correct_step_rate",
                 "redistribute/consistent_step_rate", "redistribute/grader_accuracy",
                 "redistribute/loss", "success_rate"):
        assert all(np.isfinite(float(r[name])) for r in rows), name
    ends = [r for r in rows if r["eval/success_rate"] not in ("", "nan")]
    assert len(ends) == 2
    truth = [float(r["eval/success_rate"]) for r in ends]
    proxy = [float(r["eval/return"]) for r in ends]
    # A near-uniform policy: the truth near 1/5, an even answer (0, 2, 4) near 3/5.
    assert all(0.0 <= t <= 1.0 for t in truth) and np.mean(proxy) > np.mean(truth)
