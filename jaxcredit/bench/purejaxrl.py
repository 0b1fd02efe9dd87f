"""PureJaxRL's PPO from a user's own checkout, adapted to the gymnax that jaxcredit runs on.

PureJaxRL (Lu et al. 2022, github.com/luchris429/purejaxrl) is not part of jaxcredit and none of
its code is copied here: ``jaxcredit bench train --purejaxrl DIR`` (a checkout, the folder that
holds ``purejaxrl/ppo.py``) or ``--purejaxrl-git DIR`` (a bare git directory; its ``HEAD``) loads
its ``ppo.py`` and ``wrappers.py`` as they are. Three things are bridged from the outside,
without editing its source:

* gymnax ≥ 1.0's ``env.step`` returns ``(obs, state, reward, terminated, truncated, info)``;
  ``ppo.py`` and its wrappers unpack the older five values ``(obs, state, reward, done, info)``.
  The module's ``gymnax`` is replaced by a view of gymnax whose ``make`` wraps the environment in
  :class:`FiveValueStep` (``done = terminated or truncated``, what the old API returned).
* ``wrappers.py`` imports brax and navix at the top for wrappers PPO on CartPole does not use.
  Where they are not installed, stand-in modules (:class:`_StandIn`) satisfy the imports and fail
  only if something of theirs is actually used.
* Its networks take flax's orthogonal initialiser, whose batched QR under ``jax.vmap`` (the
  many-seeds race vmaps PureJaxRL's ``train``) can deadlock XLA:CPU's thread pool with XLA's
  default flags (docs/xla_cpu_hang.md; the 2-seed race hung on 2026-12-03 with two pool threads
  in ``lapack_sorgqr_ffi`` → ``ParallelBatchMap`` → ``BlockingCounter::Wait``). The module's
  ``orthogonal`` is rebound to jaxcredit's (:func:`jaxcredit.networks.orthogonal`): the same
  matrices, drawn one seed at a time, so both engines initialise the same way.

Its PPO is then timed with its own defaults (the ``config`` dict under ``__main__`` in ``ppo.py``).

Its recurrent PPO (``ppo_rnn.py``, ``--rnn``) loads the same way as ``ppo.py``, with two more
bridges for the flax < 0.7 cell API it was written against: its ``ScannedRNN.initialize_carry``
calls ``nn.GRUCell.initialize_carry(key, (batch,), size)``, a classmethod there and an instance
method taking ``(key, input_shape)`` now, so it is rebound to what the old call returned, zeros
of shape ``(batch, size)`` (flax's default carry initialiser); and it builds ``nn.GRUCell()``
without ``features``, which the old cell read off the carry, so the module's ``nn`` is a view of
flax.linen whose ``GRUCell`` has PureJaxRL's width, 128 (its ``initialize_carry(..., 128)``).
Its GRU's recurrent kernel keeps flax's own orthogonal initialiser (it is not a module-level
name), so that race runs one seed, never under ``jax.vmap``.

Its DQN (``dqn.py``, ``--dqn``) needs three more bridges, again from the outside: it wraps the
environment in gymnax's own ``LogWrapper``, which in gymnax ≥ 1.0 returns six values, so the
module's ``LogWrapper`` name is rebound to one whose ``step`` returns the old five; it calls
``jax.tree_map``, removed from jax, so the module's ``jax`` name is rebound to a view of jax
that has it (``jax.tree.map``); and it imports wandb, stood in for where not installed.

Its continuous PPO (``ppo_continuous_action.py``, ``--continuous``) loads like ``ppo.py`` and
trains on Brax: it builds ``BraxGymnaxWrapper(ENV_NAME)`` with ``env_params = None`` and wraps
it in ``LogWrapper → ClipAction → VecEnv → NormalizeVecObservation → NormalizeVecReward``. The
module's ``BraxGymnaxWrapper`` name is rebound (:func:`brax_like_factory`) to a factory that
serves a continuous task of jaxcredit's registry (gymnax's ``Pendulum-v1`` by default) in the
shape its Brax wrapper has, so that the script runs unchanged on it:

* actions in [−1, 1] (:class:`UnitBoxActions`): a Brax task's action space is the unit box,
  and ``ClipAction`` clips to [−1, 1] whatever the task's bounds; the action is mapped affinely
  onto the task's own bounds (Pendulum's torque: [−2, 2]) before the task steps. jaxcredit's
  engine races on the same :class:`UnitBoxActions` task, so both clip and scale alike;
* the five-value step of :class:`FiveValueStep`, with an empty ``info`` as its Brax wrapper
  returns (:class:`BraxLikeStep`): gymnax's own entries (``final_observation``, ``discount``)
  would otherwise be stacked into the metrics its ``train`` returns, an output the script never
  has on Brax;
* ``params`` None stands for the task's parameters (its defaults from the registry).

A name the registry does not know goes to PureJaxRL's own ``BraxGymnaxWrapper`` (Brax, where
installed; the stand-in's ImportError otherwise).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import pathlib
import subprocess
import sys
import types
from typing import Any, Iterator

import gymnax

# Packages that PureJaxRL's wrappers import for other environments than PPO's CartPole.
OPTIONAL_PACKAGES = ("brax", "navix", "wandb")
FILES = ("ppo.py", "wrappers.py")
DQN_FILE = "dqn.py"
RNN_FILE = "ppo_rnn.py"
CONTINUOUS_FILE = "ppo_continuous_action.py"
RNN_WIDTH = 128  # ppo_rnn.py's GRU width (its ScannedRNN.initialize_carry(..., 128))


class FiveValueStep:
    """A gymnax environment whose ``step`` returns the five values of gymnax < 1.0.

    ``done = terminated or truncated``: the old API's ``done`` also ended episodes at the time
    limit. Everything else is the wrapped environment's.
    """

    def __init__(self, env: Any):
        self._env = env

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def step(self, key, state, action, params=None):
        out = self._env.step(key, state, action, params)
        if len(out) == 5:  # already the old API
            return out
        obs, state, reward, terminated, truncated, info = out
        return obs, state, reward, terminated | truncated, info


class BraxLikeStep(FiveValueStep):
    """:class:`FiveValueStep` with an empty ``info``, as PureJaxRL's ``BraxGymnaxWrapper``
    returns (module docstring)."""

    def step(self, key, state, action, params=None):
        obs, state, reward, done, _ = super().step(key, state, action, params)
        return obs, state, reward, done, {}


class UnitBoxActions:
    """A gymnax task with ``Box`` actions, taking actions in [−1, 1] (Brax's convention) and
    mapping them affinely onto its own bounds; six-value step, the task's ``info`` kept.

    ``params`` None in any method stands for the parameters the task was made with.
    """

    def __init__(self, env: Any, params: Any):
        import numpy as np  # noqa: PLC0415

        self._env, self._params = env, params
        space = env.action_space(params)
        self._shape = tuple(space.shape) or (1,)
        self._low = np.broadcast_to(np.asarray(space.low, np.float32), self._shape).copy()
        self._high = np.broadcast_to(np.asarray(space.high, np.float32), self._shape).copy()
        if not (np.isfinite(self._low).all() and np.isfinite(self._high).all()):
            raise ValueError("a task with unbounded actions has no unit-box form")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    @property
    def default_params(self) -> Any:
        return self._params

    def _or_own(self, params: Any) -> Any:
        return self._params if params is None else params

    def to_task(self, action):
        """An action of [−1, 1] on the task's bounds."""
        return self._low + (action + 1.0) * (self._high - self._low) / 2.0

    def reset(self, key, params=None):
        return self._env.reset(key, self._or_own(params))

    def step(self, key, state, action, params=None):
        return self._env.step(key, state, self.to_task(action), self._or_own(params))

    def observation_space(self, params=None):
        return self._env.observation_space(self._or_own(params))

    def action_space(self, params=None):
        from gymnax.environments import spaces  # noqa: PLC0415

        return spaces.Box(-1.0, 1.0, self._shape, self._env.action_space(
            self._or_own(params)).dtype)


def continuous_task(name: str) -> UnitBoxActions:
    """The task ``name`` of jaxcredit's registry with unit-box actions (:class:`UnitBoxActions`),
    what both engines of the continuous race step; a one-line ValueError for an unknown name or
    a task whose actions are not a bounded ``Box``."""
    from jaxcredit import envs  # noqa: PLC0415

    try:
        env, params = envs.make(name)
    except Exception as err:  # noqa: BLE001 (the registry's message, on one line)
        raise ValueError(f"--continuous-env {name}: {' '.join(str(err).split())}") from None
    if not hasattr(env.action_space(params), "low"):
        raise ValueError(f"--continuous-env {name}: its actions are not continuous (a "
                         f"{type(env.action_space(params)).__name__} space)")
    try:
        return UnitBoxActions(env, params)
    except ValueError as err:
        raise ValueError(f"--continuous-env {name}: {err}") from None


def brax_like_factory(original: Any) -> Any:
    """What ``BraxGymnaxWrapper`` is rebound to in ``ppo_continuous_action.py``: a task of
    jaxcredit's registry as its Brax wrapper would serve it (module docstring); ``original`` for
    other names."""
    from jaxcredit import envs  # noqa: PLC0415

    def make(env_name, *args, **kwargs):
        if env_name.removeprefix(envs.registry.DELAYED_PREFIX) not in envs.registered():
            return original(env_name, *args, **kwargs)
        return BraxLikeStep(continuous_task(env_name))

    return make


def _gymnax_five_value_view() -> types.ModuleType:
    """gymnax with ``make`` returning :class:`FiveValueStep` environments."""
    view = types.ModuleType("gymnax")
    view.__dict__.update({k: v for k, v in vars(gymnax).items() if not k.startswith("__")})

    def make(*args, **kwargs):
        env, params = gymnax.make(*args, **kwargs)
        return FiveValueStep(env), params

    view.make = make
    return view


class _StandIn(types.ModuleType):
    """A module standing in for an optional package that is not installed: every attribute is
    another stand-in, and calling one raises ImportError."""

    __path__: list = []  # a package, so that submodule imports resolve to stand-ins too

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _StandIn(f"{self.__name__}.{name}")

    def __call__(self, *args, **kwargs):
        raise ImportError(f"{self.__name__} is not installed; jaxcredit's PureJaxRL benchmark "
                          "does not use it")

    def __mro_entries__(self, bases):  # `class X(brax.Wrapper)` at import time
        return (object,)


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds :class:`_StandIn` modules for ``packages`` (placed last: installed ones win)."""

    def __init__(self, packages: tuple[str, ...]):
        self.packages = packages

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.packages:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StandIn(spec.name)

    def exec_module(self, module):
        pass


def missing_packages() -> tuple[str, ...]:
    """The optional packages of PureJaxRL's wrappers that are not installed."""
    return tuple(p for p in OPTIONAL_PACKAGES if importlib.util.find_spec(p) is None)


@contextlib.contextmanager
def _stand_ins(packages: tuple[str, ...]) -> Iterator[None]:
    finder = _StandInFinder(packages)
    sys.meta_path.append(finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [m for m in sys.modules if m.split(".")[0] in packages]:
            if isinstance(sys.modules[name], _StandIn):
                del sys.modules[name]


def _load_module(name: str, path: pathlib.Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def default_config(ppo_source: str) -> dict:
    """The ``config = {...}`` literal of ``ppo.py`` (its defaults, under ``__main__``)."""
    for node in ast.walk(ast.parse(ppo_source)):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(getattr(t, "id", None) == "config" for t in node.targets)):
            return ast.literal_eval(node.value)
    raise ValueError("PureJaxRL's ppo.py has no `config = {...}` of defaults")


def export_from_git(git_dir: str, workdir: pathlib.Path, rev: str = "HEAD",
                    files: tuple[str, ...] = FILES) -> pathlib.Path:
    """Writes ``purejaxrl/<files>`` of ``rev`` of a (bare) git directory into ``workdir``;
    returns the folder holding them."""
    for name in files:
        (workdir / name).write_text(git_show(git_dir, rev, f"purejaxrl/{name}",
                                             "--purejaxrl-git"))
    return workdir


def git_show(git_dir: str, rev: str, path: str, flag: str) -> str:
    """The text of ``path`` at ``rev`` of a (bare) git directory; a one-line ValueError naming
    ``flag`` where it cannot be read."""
    try:
        return subprocess.run(["git", "--git-dir", git_dir, "show", f"{rev}:{path}"],
                              check=True, capture_output=True, text=True).stdout
    except (subprocess.CalledProcessError, OSError) as err:
        detail = getattr(err, "stderr", "") or str(err)
        raise ValueError(f"{flag} {git_dir}: cannot read {path} at {rev}: "
                         f"{' '.join(detail.split())}") from None


def source_folder(checkout: str) -> pathlib.Path:
    """The folder with ``ppo.py`` and ``wrappers.py`` in a PureJaxRL checkout (its
    ``purejaxrl/`` package, or the checkout itself if that is the package)."""
    root = pathlib.Path(checkout).expanduser()
    for folder in (root / "purejaxrl", root):
        if all((folder / name).is_file() for name in FILES):
            return folder
    raise ValueError(f"--purejaxrl {checkout}: no purejaxrl/ppo.py and purejaxrl/wrappers.py "
                     "there (expected a checkout of luchris429/purejaxrl)")


def describe(folder: pathlib.Path, git_dir: str | None = None) -> str:
    """A short revision of the PureJaxRL source (git commit where known)."""
    command = (["git", "--git-dir", git_dir] if git_dir else ["git", "-C", str(folder)])
    try:
        out = subprocess.run([*command, "rev-parse", "--short", "HEAD"], check=True,
                             capture_output=True, text=True).stdout.strip()
    except (subprocess.CalledProcessError, OSError):
        return "unknown revision"
    return out


def load_ppo(folder: pathlib.Path, file: str = "ppo.py") -> tuple[types.ModuleType, dict]:
    """Imports PureJaxRL's ``ppo`` (or, with ``file="ppo_rnn.py"``, its recurrent PPO, which
    has the same shape) from ``folder``, adapted (module docstring), and its defaults.

    The script imports its wrappers as the top-level module ``wrappers``; that name is bound to
    PureJaxRL's file only while the script loads, then restored.
    """
    if not (folder / file).is_file():
        raise ValueError(f"no purejaxrl/{file} in {folder}")
    previous = sys.modules.get("wrappers")
    try:
        with _stand_ins(missing_packages()):
            _load_module("wrappers", folder / "wrappers.py")
            ppo = _load_module(f"purejaxrl_{file[:-3]}", folder / file)
    except Exception as err:  # noqa: BLE001 (third-party code: any failure is one message)
        raise ValueError(f"cannot import PureJaxRL's {file} from {folder}: "
                         f"{type(err).__name__}: {' '.join(str(err).split())}") from None
    finally:
        if previous is not None:
            sys.modules["wrappers"] = previous
        else:
            sys.modules.pop("wrappers", None)
    ppo.gymnax = _gymnax_five_value_view()
    if hasattr(ppo, "orthogonal"):
        from jaxcredit import networks  # noqa: PLC0415

        ppo.orthogonal = networks.orthogonal
    if hasattr(ppo, "BraxGymnaxWrapper"):  # ppo_continuous_action.py (module docstring)
        ppo.BraxGymnaxWrapper = brax_like_factory(ppo.BraxGymnaxWrapper)
    if hasattr(ppo, "ScannedRNN"):  # ppo_rnn.py: flax < 0.7's cell API (module docstring)
        import functools  # noqa: PLC0415

        import flax.linen  # noqa: PLC0415
        import jax.numpy as jnp  # noqa: PLC0415

        ppo.ScannedRNN.initialize_carry = staticmethod(
            lambda batch_size, hidden_size: jnp.zeros((batch_size, hidden_size)))
        view = types.ModuleType("flax.linen")
        view.__dict__.update({k: v for k, v in vars(flax.linen).items()
                              if not k.startswith("__")})
        view.GRUCell = functools.partial(flax.linen.GRUCell, RNN_WIDTH)
        ppo.nn = view
    return ppo, default_config((folder / file).read_text())


def _jax_with_tree_map() -> types.ModuleType:
    """jax with the ``tree_map`` that newer jax removed (as ``jax.tree.map``)."""
    import jax  # noqa: PLC0415

    view = types.ModuleType("jax")
    view.__dict__.update({k: v for k, v in vars(jax).items() if not k.startswith("__")})
    view.tree_map = jax.tree.map
    return view


def load_dqn(folder: pathlib.Path) -> tuple[types.ModuleType, dict]:
    """Imports PureJaxRL's ``dqn`` from ``folder`` (adapted, module docstring) and its defaults
    (the ``config = {...}`` in its ``main``)."""
    path = folder / DQN_FILE
    if not path.is_file():
        raise ValueError(f"no purejaxrl/{DQN_FILE} in {folder}")
    try:
        with _stand_ins(missing_packages()):
            dqn = _load_module("purejaxrl_dqn", path)
    except Exception as err:  # noqa: BLE001 (third-party code: any failure is one message)
        raise ValueError(f"cannot import PureJaxRL's dqn.py from {folder}: "
                         f"{type(err).__name__}: {' '.join(str(err).split())}") from None
    log_wrapper = dqn.LogWrapper
    dqn.LogWrapper = lambda env: FiveValueStep(log_wrapper(env))
    dqn.jax = _jax_with_tree_map()
    return dqn, default_config(path.read_text())


# purejaxql (Gallici et al.'s PQN code): the gymnax script and its CartPole settings.
PQN_FILE = "purejaxql/pqn_gymnax.py"
PQN_CONFIG = "purejaxql/config/alg/pqn_cartpole.yaml"


def load_pqn(git_dir: str, workdir: pathlib.Path, rev: str = "HEAD"
             ) -> tuple[types.ModuleType, dict, str]:
    """Imports purejaxql's ``pqn_gymnax.py`` of ``rev`` of a (bare) git directory, unedited,
    with its CartPole settings (``pqn_cartpole.yaml``) and a label with the revision.

    Adapted as PureJaxRL's DQN is: gymnax ≥ 1.0's steps through :class:`FiveValueStep` and the
    removed ``jax.tree_map``. Its ``@hydra.main`` decorator becomes the identity while it
    loads; hydra's config, wandb and safetensors (its checkpoints) are stand-ins, as the race
    uses none of them.
    """
    import yaml  # noqa: PLC0415 (only this race reads YAML)

    texts = {name: git_show(git_dir, rev, name, "--purejaxql-git")
             for name in (PQN_FILE, PQN_CONFIG)}
    path = workdir / "pqn_gymnax.py"
    path.write_text(texts[PQN_FILE])
    hydra = types.ModuleType("hydra")
    hydra.main = lambda **_: (lambda function: function)
    saved = sys.modules.get("hydra")
    sys.modules["hydra"] = hydra
    try:
        with _stand_ins(tuple(p for p in ("omegaconf", "wandb", "safetensors")
                              if importlib.util.find_spec(p) is None)):
            pqn = _load_module("purejaxql_pqn", path)
    except Exception as err:  # noqa: BLE001 (third-party code: any failure is one message)
        raise ValueError(f"cannot import purejaxql's pqn_gymnax.py from {git_dir}: "
                         f"{type(err).__name__}: {' '.join(str(err).split())}") from None
    finally:
        if saved is None:
            sys.modules.pop("hydra", None)
        else:
            sys.modules["hydra"] = saved
    log_wrapper = pqn.LogWrapper
    pqn.LogWrapper = lambda env: FiveValueStep(log_wrapper(env))
    pqn.jax = _jax_with_tree_map()
    defaults = yaml.safe_load(texts[PQN_CONFIG])
    revision = subprocess.run(["git", "--git-dir", git_dir, "rev-parse", "--short", rev],
                              capture_output=True, text=True).stdout.strip()
    return pqn, defaults, f"purejaxql {revision or rev}"
