"""Estimators by name: ``make_estimator("gae")``, ``make_estimator("nstep", n=10)``.

Entries are ``"module:factory"`` paths imported on first use, so a family of estimators can live in
its own module without import cycles. A factory takes keyword options and returns an
:class:`~jaxcredit.estimators.base.Estimator`.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from jaxcredit.estimators.base import Estimator

_REGISTRY: dict[str, str] = {
    "gae": "jaxcredit.estimators.classic:gae",
    "lambda_returns": "jaxcredit.estimators.classic:lambda_returns",
    "mc": "jaxcredit.estimators.classic:monte_carlo",
    "nstep": "jaxcredit.estimators.classic:n_step",
    "hca_return": "jaxcredit.estimators.hca:hca_return",
    "hca_state": "jaxcredit.estimators.hca:hca_state",
    "c2a2c": "jaxcredit.estimators.hca:c2a2c",
}


def registered() -> list[str]:
    """Names accepted by :func:`make_estimator`."""
    return sorted(_REGISTRY)


def register(name: str, factory_path: str) -> None:
    """Adds (or replaces) an estimator: ``factory_path`` is ``"package.module:function"``."""
    if ":" not in factory_path:
        raise ValueError(f"factory_path must look like 'module:function', got {factory_path!r}")
    _REGISTRY[name] = factory_path


def make_estimator(name: str, **options: Any) -> Estimator:
    """Builds the estimator registered as ``name`` with keyword ``options``.

    Raises:
      ValueError: unknown name (the message lists close matches), or options the factory rejects.
    """
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, _REGISTRY, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"unknown estimator {name!r}.{hint} Known: {', '.join(registered())}.")
    module_name, factory_name = _REGISTRY[name].split(":")
    factory = getattr(importlib.import_module(module_name), factory_name)
    try:
        return factory(**options)
    except TypeError as err:
        raise ValueError(f"estimator {name!r}: bad options {options}: {err}") from None
