"""Name → factory tables for every pluggable part (estimators, pipeline stages, objectives).

An entry is a ``"package.module:factory"`` path imported on first use, so a family can live in its
own module without import cycles, and a user's part defined outside the package registers with
one line::

    from jaxcredit.estimators import register
    register("td0", "my_package.credit:td0")

A name that is itself a ``"module:factory"`` path needs no registration: ``make("my_mod:td0")``
imports and calls it (the command line accepts ``--estimator my_mod:td0`` the same way).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
import sys
from typing import Any, Callable, Mapping, Optional, Sequence, Union

Factory = Union[str, Callable[..., Any]]


class Registry:
    """A table of factories for one kind of part.

    Args:
      kind: what the entries are, for messages ("estimator", "objective", ...).
      entries: initial ``{name: "module:factory"}``.
    """

    def __init__(self, kind: str, entries: dict[str, Factory] | None = None):
        self.kind = kind
        self._entries: dict[str, Factory] = dict(entries or {})

    def registered(self, package: Optional[str] = None) -> list[str]:
        """The registered names, sorted; with ``package``, only those whose factory is a
        ``"module:factory"`` path inside it (``"jaxcredit"``: the parts the package ships)."""
        return sorted(name for name, target in self._entries.items()
                      if package is None or (isinstance(target, str)
                                             and target.split(".")[0].split(":")[0] == package))

    def register(self, name: str, factory: Factory) -> None:
        """Adds (or replaces) ``name``; ``factory`` is a callable or ``"module:function"``."""
        if isinstance(factory, str) and ":" not in factory:
            raise ValueError(f"a {self.kind} factory path must look like 'module:function', "
                             f"got {factory!r}")
        self._entries[name] = factory

    def factory(self, name: str) -> Callable[..., Any]:
        """The factory of ``name`` (a registered name or a ``"module:factory"`` path)."""
        target = self._entries.get(name)
        if target is None and ":" in name:
            target = name
        if target is None:
            close = difflib.get_close_matches(name, self._entries, n=3, cutoff=0.4)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            known = ", ".join(self.registered()) or "none registered"
            raise ValueError(f"unknown {self.kind} {name!r}.{hint} Known: {known} "
                             "(or a 'module:factory' path).")
        if callable(target):
            return target
        module_name, factory_name = target.split(":", 1)
        try:
            module = import_user_module(module_name)
        except ImportError as err:
            raise ValueError(f"{self.kind} {name!r}: cannot import {module_name!r}: {err}") \
                from None
        if not hasattr(module, factory_name):
            raise ValueError(f"{self.kind} {name!r}: {module_name!r} has no {factory_name!r}")
        return getattr(module, factory_name)

    def describe(self, name: str) -> str:
        """One line about ``name``: its factory's first docstring paragraph (imports it)."""
        return describe(self.factory(name))

    def options(self, name: str, context: Sequence[str] = ()) -> list[str]:
        """``name``'s options as ``key=default`` (``key`` where it has no default), read from
        its factory's signature; ``context``: the keywords the caller supplies itself (the
        engine's environment and horizon), left out."""
        try:
            parameters = inspect.signature(self.factory(name)).parameters
        except (TypeError, ValueError):
            return []
        return [k if p.default is p.empty else f"{k}={p.default!r}"
                for k, p in parameters.items() if k not in context
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]

    def make(self, name: str, context: Optional[Mapping[str, Any]] = None,
             **options: Any) -> Any:
        """Builds ``name`` with keyword ``options``; bad options are a one-line ValueError.

        ``context`` holds what the caller can supply (the engine's: ``env``, ``env_params``,
        ``horizon``, ``group_size``): each entry is passed to a factory that takes a keyword of
        that name, or takes ``**kwargs``, unless ``options`` set it. This is the one way every
        part is given its context; ``None`` entries are not passed.
        """
        factory = self.factory(name)
        shown = ", ".join(f"{k}={v!r}" for k, v in options.items())
        unknown = unknown_options(factory, options, context or {})
        if unknown:
            raise ValueError(f"{self.kind} {name!r}: bad options {shown}: {unknown}")
        given = {**takes(factory, context or {}), **options}
        try:
            return factory(**given)
        except TypeError as err:
            # The user's options only: the context holds engine objects whose reprs mean
            # nothing to the user.
            raise ValueError(f"{self.kind} {name!r}: bad options {shown}: {err}") from None


def describe(target: Any) -> str:
    """One line about ``target`` (a factory or a class): the first paragraph of its docstring
    on one line, without pointers to the module docstring ("" without a docstring)."""
    text = " ".join((inspect.getdoc(target) or "").split("\n\n")[0].split())
    text = re.sub(r"\s*\((see )?(the )?module doc(string)?\)", "", text)
    return text


def unknown_options(factory: Callable[..., Any], options: Mapping[str, Any],
                    context: Mapping[str, Any]) -> str:
    """Why some of ``options`` are not keywords of ``factory`` ("" if all are, or if it takes
    ``**kwargs``): each unknown name with the closest option, and the options it has (the
    keywords that are not the caller's context)."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return ""
    if any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        return ""
    own = [k for k, p in parameters.items() if k not in context
           and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    bad = [k for k in options if k not in parameters]
    if not bad:
        return ""
    words = []
    for k in bad:
        close = difflib.get_close_matches(k, own, n=1)
        words.append(f"no option {k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return "; ".join(words) + f"; its options: {', '.join(own) or 'none'}"


def takes(factory: Callable[..., Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``context`` that ``factory`` accepts as keywords (all of them if it takes
    ``**kwargs``; none of the ``None`` ones)."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin or C callable: pass nothing
        return {}
    takes_all = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
    return {k: v for k, v in context.items()
            if v is not None and (takes_all or k in parameters)}


def import_user_module(name: str):
    """``importlib.import_module``, also finding modules in the current directory, as
    ``python -m`` does: a ``my_est:td0`` path given on the command line names a file next to
    the user, and the installed ``jaxcredit`` script's ``sys.path`` does not hold it."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        cwd = os.getcwd()
        if cwd in sys.path or err.name != name.split(".")[0]:
            raise
        sys.path.append(cwd)
        return importlib.import_module(name)
