"""One entry point for every environment: ``make(name, **kwargs) -> (env, env_params)``.

Names are those of gymnax (``CartPole-v1``, ``Catch-bsuite``, ``Breakout-MinAtar`` ...) and of
jaxcredit (``Shortcut``, ``DelayedEffect``, ``AmbiguousBandit``, ``KeyToDoor``,
``TaskInterleaving``, ``TreeMDP``, ``GridWorld-v1/v2``, ``DelayedGridWorld-v1/v2``, ``BitFlip``,
``GoalGrid``, ``ArithmeticChain``, ``CommandChain``, ``ChainAndSplit``, ``AccumulatedCharge``,
``KeyToDoorDistractors``, ``TMaze``,
``VisualMatch``, ``MemoryKeyToDoor``, ``DelayedCatch``) and Brax's continuous-control tasks as
``brax/<task>`` (``brax/hopper``, ``brax/halfcheetah``, ...; ``jaxcredit[control]``).
jaxcredit environments are imported lazily, by ``"module:Class"`` path.

Keyword arguments are routed by name: those accepted by the environment's constructor fix its
structure (e.g. ``n`` of Shortcut / DelayedEffect / BitFlip, ``version`` of GridWorld, shapes in
general); every other one must be a field of the environment's params record and replaces its
default (e.g. ``sigma``, ``epsilon``, ``slip_prob``, ``max_steps_in_episode``). Anything else is a
``ValueError`` naming the valid keys.

Delayed reward: the prefix ``"DelayedReward-<name>"`` wraps any registered environment (gymnax
ones included) in :class:`~jaxcredit.envs.wrappers.DelayedReward`, e.g.
``make("DelayedReward-Breakout-MinAtar")``.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from typing import Any

import gymnax
from gymnax import registration as gymnax_registration

from jaxcredit.envs.brax_env import TASKS as BRAX_TASKS  # names only: brax loads on first use
from jaxcredit.envs.wrappers import DelayedReward
from jaxcredit import registry as registry_lib
from jaxcredit.registry import import_user_module

DELAYED_PREFIX = "DelayedReward-"


@dataclasses.dataclass(frozen=True)
class _Entry:
    target: str  # "package.module:Class"
    defaults: tuple[tuple[str, Any], ...] = ()


_JAXCREDIT_ENVS: dict[str, _Entry] = {
    "Shortcut": _Entry("jaxcredit.envs.hca_tasks:Shortcut"),
    "DelayedEffect": _Entry("jaxcredit.envs.hca_tasks:DelayedEffect"),
    "AmbiguousBandit": _Entry("jaxcredit.envs.hca_tasks:AmbiguousBandit"),
    "KeyToDoor": _Entry("jaxcredit.envs.key_to_door:KeyToDoor"),
    "TaskInterleaving": _Entry("jaxcredit.envs.task_interleaving:TaskInterleaving"),
    "TreeMDP": _Entry("jaxcredit.envs.tree_mdp:TreeMDP"),
    "GridWorld-v1": _Entry("jaxcredit.envs.grid:GridWorld", (("version", 1),)),
    "GridWorld-v2": _Entry("jaxcredit.envs.grid:GridWorld", (("version", 2),)),
    "DelayedGridWorld-v1": _Entry("jaxcredit.envs.grid:DelayedGridWorld", (("version", 1),)),
    "DelayedGridWorld-v2": _Entry("jaxcredit.envs.grid:DelayedGridWorld", (("version", 2),)),
    "BitFlip": _Entry("jaxcredit.envs.bitflip:BitFlip"),
    "ArithmeticChain": _Entry("jaxcredit.envs.arithmetic_chain:ArithmeticChain"),
    "CommandChain": _Entry("jaxcredit.envs.command_chain:CommandChain"),
    "GoalGrid": _Entry("jaxcredit.envs.goal_grid:GoalGrid"),
    "ChainAndSplit": _Entry("jaxcredit.envs.chain_and_split:ChainAndSplit"),
    "AccumulatedCharge": _Entry("jaxcredit.envs.chunktd_tasks:AccumulatedCharge"),
    "KeyToDoorDistractors": _Entry("jaxcredit.envs.chunktd_tasks:KeyToDoorDistractors"),
    "TMaze": _Entry("jaxcredit.envs.tmaze:TMaze"),
    "XMiniGrid": _Entry("jaxcredit.envs.xminigrid_env:XMiniGrid"),
    "VisualMatch": _Entry("jaxcredit.envs.visual_match:VisualMatch"),
    "MemoryKeyToDoor": _Entry("jaxcredit.envs.memory_key_to_door:MemoryKeyToDoor"),
    "DelayedCatch": _Entry("jaxcredit.envs.delayed_catch:DelayedCatch"),
    **{f"brax/{task}": _Entry("jaxcredit.envs.brax_env:BraxEnv", (("env_name", task),))
       for task in BRAX_TASKS},
}


def register(name: str, target: str, **defaults: Any) -> None:
    """Adds (or replaces) an environment: ``target`` is ``"package.module:Class"`` (a gymnax
    environment class or factory); ``defaults`` are constructor arguments fixed by the name."""
    if ":" not in target:
        raise ValueError(f"an environment target must look like 'module:Class', got {target!r}")
    _JAXCREDIT_ENVS[name] = _Entry(target, tuple(sorted(defaults.items())))


def registered() -> list[str]:
    """Every registered name: jaxcredit's first, then gymnax's (the ``DelayedReward-`` prefix
    applies to all of them and is not listed)."""
    return list(_JAXCREDIT_ENVS) + [n for n in gymnax.registered_envs if n not in _JAXCREDIT_ENVS]


def describe(name: str) -> str:
    """One line about environment ``name``: its class's first docstring paragraph. gymnax's are
    named as such without being built (building some downloads data, e.g. MNISTBandit)."""
    if name in _JAXCREDIT_ENVS:
        return registry_lib.describe(_load(_JAXCREDIT_ENVS[name].target))
    if name not in gymnax.registered_envs:
        raise _unknown(name)
    return "gymnax environment (its documentation: github.com/RobertTLange/gymnax)"


def _unknown(name: str) -> ValueError:
    close = difflib.get_close_matches(name, registered(), n=5, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return ValueError(f"Unknown environment {name!r}.{hint} See jaxcredit.envs.registered().")


def _load(target: str):
    module_name, attr = target.split(":", 1)
    try:
        module = import_user_module(module_name)
    except ModuleNotFoundError as error:
        raise ValueError(f"Environment module {module_name} is not available: {error}") from None
    if not hasattr(module, attr):
        raise ValueError(f"Environment module {module_name} has no {attr!r}")
    return getattr(module, attr)


def _constructor_keys(factory) -> set[str] | None:
    """Keyword names the factory accepts; None when it takes **kwargs."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _split_kwargs(name: str, factory, kwargs: dict[str, Any]):
    accepted = _constructor_keys(factory)
    if accepted is None:
        return dict(kwargs), {}
    init = {k: v for k, v in kwargs.items() if k in accepted}
    rest = {k: v for k, v in kwargs.items() if k not in accepted}
    return init, rest


def _apply_params(name: str, env, init_keys, rest: dict[str, Any]):
    params = env.default_params
    if not rest:
        return params
    fields = set(getattr(params, "__dataclass_fields__", {}))
    bad = sorted(set(rest) - fields)
    if bad:
        valid = sorted(set(init_keys) | fields)
        raise ValueError(f"{name}: unknown keyword(s) {bad}; valid keywords: {valid}.")
    return params.replace(**rest)


def make(name: str, **kwargs) -> tuple[Any, Any]:
    """Creates an environment and its params by registered name.

    Args:
      name: a name from :func:`registered`, optionally prefixed with ``"DelayedReward-"``.
      **kwargs: constructor arguments (structure) and params fields (everything else).

    Returns:
      ``(env, env_params)``.

    Raises:
      ValueError: unknown name (with close matches) or keyword.
    """
    if not isinstance(name, str):
        raise ValueError(f"Environment name must be a string, got {type(name).__name__}.")
    if name.startswith(DELAYED_PREFIX):
        env, params = make(name[len(DELAYED_PREFIX):], **kwargs)
        return DelayedReward(env), params
    if name in _JAXCREDIT_ENVS or (":" in name and name not in gymnax.registered_envs):
        entry = _JAXCREDIT_ENVS.get(name, _Entry(name))
        factory = _load(entry.target)
        init, rest = _split_kwargs(name, factory, kwargs)
        fixed = sorted(set(init) & set(dict(entry.defaults)))
        if fixed:
            raise ValueError(f"{name}: {fixed} is fixed by the name; pick another name instead.")
        try:
            env = factory(**{**dict(entry.defaults), **init})
        except (TypeError, ValueError) as error:
            shown = ", ".join(f"{k}={v!r}" for k, v in init.items())
            raise ValueError(f"{name}({shown}): {' '.join(str(error).split())}") from None
        init_keys = _constructor_keys(factory) or set()
        return env, _apply_params(name, env, init_keys, rest)
    if name in gymnax.registered_envs:
        factory = gymnax_registration._registry[name]
        init, rest = _split_kwargs(name, factory, kwargs)
        env, _ = gymnax.make(name, **init)
        init_keys = _constructor_keys(factory) or set()
        return env, _apply_params(name, env, init_keys, rest)
    raise _unknown(name)


def options(name: str, **kwargs) -> dict[str, Any]:
    """Every option of an environment with its value: the constructor's arguments (defaults
    filled in) and the scalar fields of its params, after ``kwargs``. For headers that must say
    which task was run when the user gave only some of its options."""
    base = name[len(DELAYED_PREFIX):] if name.startswith(DELAYED_PREFIX) else name
    env, params = make(name, **kwargs)
    values: dict[str, Any] = {}
    if base in _JAXCREDIT_ENVS or (":" in base and base not in gymnax.registered_envs):
        entry = _JAXCREDIT_ENVS.get(base, _Entry(base))
        try:
            signature = inspect.signature(_load(entry.target)).parameters.values()
        except (TypeError, ValueError):
            signature = ()
        fixed = dict(entry.defaults)
        for p in signature:
            if p.name not in fixed and p.default is not inspect.Parameter.empty:
                values[p.name] = kwargs.get(p.name, p.default)
    for field in getattr(params, "__dataclass_fields__", {}):
        value = getattr(params, field)
        if field != "max_steps_in_episode" and isinstance(value, (bool, int, float)):
            values[field] = value
    return values
