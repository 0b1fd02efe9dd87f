"""Population initialisation without batched LAPACK calls (jaxcredit.networks.orthogonal).

``jax.jit(jax.vmap(engine.init))`` over 256 keys hung 2 of 2 times on this project's 2-core CPU
with XLA's default flags and flax's orthogonal initialiser (batched QR in jaxlib's
ParallelBatchMap); jaxcredit's initialiser runs a batched call as a loop of unbatched ones.
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcredit.agents.config import FittedStageConfig, TrainConfig
from jaxcredit.agents.train import make_engine
from jaxcredit.networks import orthogonal


def test_orthogonal_is_flax_orthogonal_and_vmaps_to_the_same_matrices():
    import flax.linen as nn

    keys = jax.random.split(jax.random.key(3), 5)
    ours = jax.vmap(lambda k: orthogonal(1.7)(k, (6, 4)))(keys)
    theirs = jnp.stack([nn.initializers.orthogonal(1.7)(k, (6, 4)) for k in keys])
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)
    gram = jnp.einsum("bij,bik->bjk", ours, ours) / 1.7 ** 2
    np.testing.assert_allclose(gram, jnp.broadcast_to(jnp.eye(4), gram.shape), atol=1e-5)


def test_vmapped_engine_init_equals_one_init_per_key():
    engine = make_engine(TrainConfig(
        algo="a2c", env="DelayedEffect", num_envs=2, num_steps=4, total_timesteps=8,
        redistribute=FittedStageConfig("rudder", options=(("features", 4), ("lessons", 2)))))
    keys = jax.random.split(jax.random.key(0), 3)
    batched = jax.jit(jax.vmap(engine.init))(keys)
    init = jax.jit(engine.init)  # one compile, not one per operation of an eager init
    one_by_one = [init(k) for k in keys]
    for i, single in enumerate(one_by_one):
        for a, b in zip(jax.tree.leaves(jax.tree.map(lambda x: x[i], batched.agent.params)),
                        jax.tree.leaves(single.agent.params)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        for a, b in zip(jax.tree.leaves(jax.tree.map(lambda x: x[i],
                                                     batched.credit.redistributor.params)),
                        jax.tree.leaves(single.credit.redistributor.params)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


PROGRAM = """
import jax
from jaxcredit.agents.config import TrainConfig
from jaxcredit.agents.train import make_engine
engine = make_engine(TrainConfig(algo="a2c", env="DelayedEffect", num_envs=4, num_steps=8,
                                 total_timesteps=128))
jax.block_until_ready(jax.jit(jax.vmap(engine.init))(jax.random.split(jax.random.key(0), 256)))
print("done")
"""


def test_population_init_finishes_with_xla_default_flags():
    """The program that hung with flax's batched QR (module docstring) finishes in seconds."""
    env = dict(os.environ, JAXCREDIT_SAFE_XLA_CPU="0")
    # Neither the safety flags nor the suite's compile-time flags (tests/conftest.py).
    dropped = ("concurrency_optimized", "multi_thread", "optimization_level", "fusion_emitters")
    env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split()
                                if not any(name in f for name in dropped))
    try:
        done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                              text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("jit(vmap(engine.init)) over 256 keys hung with XLA's default flags")
    assert done.returncode == 0 and "done" in done.stdout, done.stderr
