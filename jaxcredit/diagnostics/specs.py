"""Estimator specs: how a command line or a config names an estimator with its options.

A spec is ``NAME`` or ``NAME:KEY=VALUE:KEY=VALUE...``, e.g. ``hca_return:form=all_action:mix=0.5``
or ``hca_return:model=oracle``. ``NAME`` is a registered estimator or a ``module:factory`` path
(the parts without ``=`` make up the name). Values are read as int, float, bool or None where
they look like one, else kept as strings.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from jaxcredit.estimators import make_estimator
from jaxcredit.estimators.base import Estimator
from jaxcredit.flags import literal

# The Monte-Carlo return without a baseline: the ``mc`` estimator with the critic V ≡ 0.
REINFORCE = "reinforce"


@dataclasses.dataclass(frozen=True)
class EstimatorSpec:
    """An estimator as named on the command line: ``label`` (the spec text), registry ``name``
    and keyword ``options``."""

    label: str
    name: str
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def zero_critic(self) -> bool:
        """``reinforce`` credits the plain return: its critic is V ≡ 0."""
        return self.name == REINFORCE

    def build(self, env: Any = None, env_params: Any = None) -> Estimator:
        """The estimator (``reinforce`` is ``mc``), given the environment where its factory
        takes it; a one-line ValueError on a bad name or option."""
        name = "mc" if self.name == REINFORCE else self.name
        return make_estimator(name, context={"env": env, "env_params": env_params},
                              **dict(self.options))


def parse_spec(text: str) -> EstimatorSpec:
    """Parses one spec (module docstring); raises a one-line ValueError on a malformed one."""
    label = text.strip()
    name_parts, options = [], []
    for part in label.split(":"):
        if "=" in part:
            key, value = part.split("=", 1)
            options.append((key.strip().replace("-", "_"), literal(value.strip())))
        elif options:
            raise ValueError(f"bad estimator spec {label!r}: {part!r} after the options; "
                             "expected NAME:KEY=VALUE:...")
        else:
            name_parts.append(part)
    name = ":".join(name_parts)
    if not name:
        raise ValueError(f"bad estimator spec {label!r}: no estimator name")
    return EstimatorSpec(label=label, name=name, options=tuple(options))


def parse_specs(items: Iterable[str]) -> tuple[EstimatorSpec, ...]:
    """Specs from strings that may each hold several, separated by commas (``"gae,mc"``)."""
    return tuple(parse_spec(text) for item in items for text in item.split(",") if text.strip())
