"""Sweeps: grid / random settings, population layout, and sharding over 4 (forced host) devices
giving the same numbers as 1 device."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from conftest import users_xla_env
from jaxcredit.agents import sweep


def test_grid_is_cartesian_product_last_axis_fastest():
    settings = sweep.grid(lr=[1e-3, 3e-4], gamma=[0.9, 0.99, 0.999])
    assert len(settings) == 6
    assert settings[0] == {"lr": 1e-3, "gamma": 0.9}
    assert settings[1] == {"lr": 1e-3, "gamma": 0.99}
    assert settings[5] == {"lr": 3e-4, "gamma": 0.999}
    with pytest.raises(ValueError, match="unknown hyper-parameter"):
        sweep.grid(learning_rate=[1.0])


def test_random_search_is_reproducible_and_in_range():
    a = sweep.random_search(7, 50, lr=(1e-5, 1e-2, "log"), ent_coef=(0.0, 0.05))
    b = sweep.random_search(7, 50, lr=(1e-5, 1e-2, "log"), ent_coef=(0.0, 0.05))
    assert a == b and len(a) == 50
    lr = np.array([s["lr"] for s in a])
    assert lr.min() >= 1e-5 and lr.max() <= 1e-2
    # log-uniform: about half the samples below the geometric midpoint 3.16e-4
    assert 10 < np.sum(lr < np.sqrt(1e-5 * 1e-2)) < 40
    with pytest.raises(ValueError, match="bad range"):
        sweep.random_search(0, 3, lr=(0.0, 1.0, "log"))


def test_population_layout_shares_seed_keys_across_settings():
    pop = sweep.make_population([{"lr": 1e-3}, {"lr": 1e-4}, {"lr": 1e-5}], num_seeds=2, seed=3)
    np.testing.assert_array_equal(pop.hparam_index, [0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(pop.seed_index, [0, 1, 0, 1, 0, 1])
    np.testing.assert_allclose(pop.hparams.lr, [1e-3, 1e-3, 1e-4, 1e-4, 1e-5, 1e-5], rtol=1e-6)
    np.testing.assert_allclose(pop.hparams.gamma, 0.99)  # defaults filled in
    data = jax.random.key_data(pop.keys)
    np.testing.assert_array_equal(data[0], data[2])
    np.testing.assert_array_equal(data[1], data[5])
    assert not np.array_equal(data[0], data[1])
    metrics = {"x": np.arange(6 * 4).reshape(6, 4)}
    assert sweep.by_setting(metrics, pop)["x"].shape == (3, 2, 4)
    with pytest.raises(ValueError, match="lambda must lie"):
        sweep.make_population([{"lambda_": 2.0}], 1)


def test_indivisible_population_error_message():
    mesh = sweep.sweep_mesh()
    fake = type("FakeMesh", (), {"devices": np.empty(4)})()
    with pytest.raises(ValueError, match="sweep size 6 .* not divisible by the 4 devices"):
        sweep.check_divisible(6, fake)
    sweep.check_divisible(6, mesh)  # one real device: anything divides


SCRIPT = textwrap.dedent("""
    import json, jax, numpy as np
    from jaxcredit.agents import sweep
    from jaxcredit.agents import TrainConfig, make_engine
    assert len(jax.devices()) == 4, jax.devices()
    # No evaluation: smaller programs to compile (the sharding is what is checked).
    engine = make_engine(TrainConfig.from_flat(algo="a2c", num_envs=4, num_steps=8, eval_every=0,
                                               total_timesteps=4 * 8 * 3, hidden_sizes=(8,),
                                               policy=POLICY))
    six = sweep.make_population([{"lr": 1e-3}, {"lr": 3e-3}, {"lr": 1e-2}], num_seeds=2)
    out = {}
    try:
        sweep.run_sweep(engine, six, sweep.sweep_mesh())
        out["error"] = None
    except ValueError as err:
        out["error"] = str(err)
    # Padded to 8: two members per device. Bitwise equality holds whenever every device has at
    # least two members (docs/engine.md: a lone member per device can differ by float32 rounding).
    states4, metrics4 = sweep.run_sweep(engine, six, sweep.sweep_mesh(), pad=True)
    out["devices_used"] = len(jax.tree.leaves(states4.agent.params)[0].sharding.device_set)
    out["shape"] = list(np.shape(metrics4["loss"]))
    states1, metrics1 = sweep.run_sweep(engine, six, sweep.sweep_mesh(jax.devices()[:1]))
    out["bitwise"] = all(np.array_equal(metrics4[k], metrics1[k], equal_nan=True)
                         for k in metrics1) and all(
        np.array_equal(a, b) for a, b in zip(jax.tree.leaves(jax.device_get(states4.agent.params)),
                                             jax.tree.leaves(jax.device_get(states1.agent.params))))
    out["max_diff"] = max(float(np.nanmax(np.abs(np.asarray(metrics4[k], float)
                                                  - np.asarray(metrics1[k], float))))
                          for k in metrics1)
    # The two members of each device run one after the other inside the program (memory-aware
    # sweeps), against both at once above (checked with the MLP; member batching does not
    # depend on the policy).
    out["groups_diff"] = 0.0
    if POLICY == "mlp":
        _, single = sweep.run_sweep(engine, six, sweep.sweep_mesh(), pad=True, member_batch=1)
        out["groups_diff"] = max(float(np.nanmax(np.abs(np.asarray(metrics4[k], float)
                                                         - np.asarray(single[k], float))))
                                 for k in metrics4)
    print("RESULT" + json.dumps(out))
""")


# Each flag set and each policy once: the MLP (and member batching) at the users' flags, which
# are the ones that matter to a run; the GRU at the suite's flags, so the sharded program is
# checked at those too (tests/test_distributed.py compares sharded runs at the suite's flags as
# well). A third case, the MLP at the suite's flags, checked no flag set or policy that these two
# leave out, and cost about 15 s on 2 cores.
@pytest.mark.parametrize("flags, policy", [("users", "mlp"), ("suite", "gru")])
def test_sharded_sweep_matches_single_device(flags, policy):
    """At the users' XLA flags (XLA's defaults) and at the suite's; with a recurrent policy, its
    memory sharded with the environments."""
    four = "--xla_force_host_platform_device_count=4"
    env = (users_xla_env(four) if flags == "users" else dict(
        os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + four).strip(),
        JAX_PLATFORMS="cpu"))
    script = SCRIPT.replace("POLICY", repr(policy))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    out = json.loads(line[len("RESULT"):])
    assert "sweep size 6 (settings × seeds) is not divisible by the 4 devices" in out["error"]
    assert out["devices_used"] == 4
    assert out["shape"] == [6, 3]  # padding dropped
    assert out["bitwise"], f"4-device sweep differs from 1 device by {out['max_diff']}"
    assert out["groups_diff"] <= 1e-5
