"""Brax's continuous-control tasks behind gymnax's API: ``BraxEnv`` (names ``brax/<task>``).

Brax (Freeman et al. 2021, arXiv 2106.13281; ``google/brax``, pip ``brax``, ``jaxcredit[control]``)
simulates rigid bodies in JAX. Its tasks (``brax.envs.get_environment``: ``ant``, ``halfcheetah``,
``hopper``, ``humanoid``, ``humanoidstandup``, ``inverted_pendulum``,
``inverted_double_pendulum``, ``pusher``, ``reacher``, ``swimmer``, ``walker2d``) take an action
in [−1, 1]^D, pay a dense reward and some end early (``hopper``, ``walker2d``, ``ant``,
``humanoid`` when the body falls; the pendulums when the pole tips over).

The adapter. Brax's ``reset(rng) -> State`` and ``step(state, action) -> State`` carry the
observation, the reward and a float ``done`` in the state and have no time limit of their own
(Brax adds one with its ``EpisodeWrapper``). Here ``step_env`` returns Brax's ``done`` as
``terminated``; the time limit (``max_steps_in_episode``, 1000 by default as in
``brax.envs.create``) is gymnax's truncation, set only where the episode did not terminate, as
``EpisodeWrapper``'s ``truncation`` flag; gymnax's ``step`` adds the auto-reset and
``info["final_observation"]``. Actions are clipped to [−1, 1] before Brax sees them (its control
costs then stay those of valid actions); ``action_space`` is ``Box(−1, 1, (D,))`` and
``observation_space`` ``Box(−inf, inf, (obs_size,))``.

The physics backend (``backend``): ``spring``, ``positional``, ``generalized`` or ``mjx``. The
default, ``None``, takes ``spring`` where the task has it (every task but ``swimmer``, which has
only ``generalized``): on a CPU it compiles and steps fastest (docs/envs.md, "Continuous
control"). Brax's own default is ``generalized``; pass ``backend="generalized"`` or ``"mjx"``
to compare with results reported for those.

The Brax task is built on first use (its spaces, ``reset`` or ``step``), not by ``make``: building
one parses its MJCF model, and ``import brax`` alone takes seconds.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
from typing import Any, Optional

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

Array = jax.Array
BACKENDS = ("spring", "positional", "generalized", "mjx")
# The tasks of brax 0.14's registry (its test task ``fast`` left out), registered as brax/<name>.
TASKS = ("ant", "halfcheetah", "hopper", "humanoid", "humanoidstandup", "inverted_pendulum",
         "inverted_double_pendulum", "pusher", "reacher", "swimmer", "walker2d")


@struct.dataclass
class BraxEnvState(environment.EnvState):
    brax: Any  # Brax's State (pipeline state, observation, reward, done, metrics, info)
    time: int


@struct.dataclass
class BraxEnvParams(environment.EnvParams):
    max_steps_in_episode: int = 1000


def _import_brax_envs():
    # mujoco.mjx prints a line for each of its optional GPU back-ends it cannot import.
    with contextlib.redirect_stdout(io.StringIO()):
        from brax import envs  # noqa: PLC0415 (an optional dependency, loaded where used)
    return envs


def _raw_key(key: Array) -> Array:
    """Brax's tasks split and draw from uint32 keys; a typed key becomes its key data."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return key


class BraxEnv(environment.Environment):
    """A Brax continuous-control task with gymnax's six-value step: actions in [−1, 1]^D,
    Brax's ``done`` as termination, the time limit as truncation (module docstring)."""

    def __init__(self, env_name: str = "inverted_pendulum", backend: Optional[str] = None,
                 brax_options: Optional[dict] = None):
        super().__init__()
        if importlib.util.find_spec("brax") is None:
            raise ValueError("Brax environments need the brax package: pip install "
                             "'jaxcredit[control]'")
        if backend is not None and backend not in BACKENDS:
            raise ValueError(f"unknown Brax backend {backend!r}; choose one of "
                             f"{', '.join(BACKENDS)} (or None: spring where the task has it)")
        self.env_name = env_name
        self.requested_backend = backend
        self.brax_options = dict(brax_options or {})

    @functools.cached_property
    def brax_env(self):
        """The Brax task itself, built on first use."""
        envs = _import_brax_envs()
        tries = [self.requested_backend] if self.requested_backend else ["spring", None]
        for backend in tries:
            options = dict(self.brax_options, **({"backend": backend} if backend else {}))
            try:
                # Built concretely even when first reached inside jit (Brax makes arrays here).
                with jax.ensure_compile_time_eval():
                    return envs.get_environment(self.env_name, **options)
            except KeyError:
                raise ValueError(f"unknown Brax task {self.env_name!r}; Brax 0.14 has "
                                 f"{', '.join(TASKS)}") from None
            except ValueError as error:
                # A task without the spring backend (swimmer) falls back to its own default.
                if backend is None or self.requested_backend or "backend" not in str(error):
                    raise ValueError(f"brax/{self.env_name} (backend {backend}): "
                                     f"{error}") from None

    @functools.cached_property
    def _sizes(self) -> tuple[int, int]:
        env = self.brax_env
        obs = jax.eval_shape(env.reset, jax.ShapeDtypeStruct((2,), jnp.uint32)).obs
        return int(obs.shape[-1]), int(env.action_size)

    @property
    def backend(self) -> str:
        """The backend the task runs on (``spring`` or the task's own where it has no spring)."""
        return self.brax_env.backend

    @property
    def obs_size(self) -> int:
        return self._sizes[0]

    @property
    def num_actions(self) -> int:
        """The action's dimension D (gymnax's convention for its continuous tasks)."""
        return self._sizes[1]

    @property
    def name(self) -> str:
        return f"brax/{self.env_name}"

    @property
    def default_params(self) -> BraxEnvParams:
        return BraxEnvParams()

    def action_space(self, params=None) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (self.num_actions,), jnp.float32)

    def observation_space(self, params=None) -> spaces.Box:
        return spaces.Box(-jnp.inf, jnp.inf, (self.obs_size,), jnp.float32)

    @staticmethod
    def _typed(brax_state):
        # Some tasks set reward or done to Python floats in step: fix the leaves' types, so that
        # the reset and step states select and scan alike.
        return brax_state.replace(reward=jnp.asarray(brax_state.reward, jnp.float32),
                                  done=jnp.asarray(brax_state.done, jnp.float32))

    def get_obs(self, state, params=None, key=None) -> Array:
        return state.brax.obs

    def reset_env(self, key, params):
        brax_state = self._typed(self.brax_env.reset(_raw_key(key)))
        return brax_state.obs, BraxEnvState(brax=brax_state, time=0)

    def step_env(self, key, state, action, params):
        del key  # Brax's tasks step deterministically
        action = jnp.clip(jnp.asarray(action, jnp.float32).reshape(self.num_actions), -1.0, 1.0)
        brax_state = self._typed(self.brax_env.step(state.brax, action))
        new = BraxEnvState(brax=brax_state, time=state.time + 1)
        return brax_state.obs, new, brax_state.reward, self.is_terminated(new, params), {}

    def is_terminated(self, state, params) -> Array:
        return state.brax.done > 0.5

    def is_truncated(self, state, params) -> Array:
        return (state.time >= params.max_steps_in_episode) & ~self.is_terminated(state, params)
