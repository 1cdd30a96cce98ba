"""The declared choices and bounds of a settings dataclass, checked from its type hints: a field typed
`Literal[...]` holds one of its values, one typed `Annotated[int, Ge(1)]` (annotated_types, the bounds pydantic
reads) lies within them. Not a type check: azlib.config checks the types when it reads parameters."""

from __future__ import annotations

import dataclasses
import operator
import types
import typing
from functools import cache
from typing import Annotated, Literal, Union

from annotated_types import Ge, Gt, Le, Lt

BOUNDS = {Ge: (">=", operator.ge), Gt: (">", operator.gt), Le: ("<=", operator.le), Lt: ("<", operator.lt)}


@cache
def _declared(settings: type) -> dict[str, tuple[tuple | None, list, bool]]:
    """Field -> (its Literal's values or None, its bounds as (symbol, comparison, bound), whether None is allowed)."""
    hints = typing.get_type_hints(settings, include_extras=True)
    out = {}
    for f in dataclasses.fields(settings):
        hint = hints[f.name]
        parts = typing.get_args(hint) if typing.get_origin(hint) in (Union, types.UnionType) else (hint,)
        choices, bounds = None, []
        for part in parts:
            if typing.get_origin(part) is Annotated:
                part, *metadata = typing.get_args(part)
                for m in metadata:
                    if type(m) in BOUNDS:  # Ge(1).ge == 1, Lt(1).lt == 1, ...
                        bounds.append((*BOUNDS[type(m)], getattr(m, type(m).__name__.lower())))
            if typing.get_origin(part) is Literal:
                choices = typing.get_args(part)
        if choices or bounds:
            out[f.name] = choices, bounds, type(None) in parts
    return out


def check_fields(settings) -> None:
    """Raise ValueError naming the first field outside its declared choices or bounds (None passes where the
    type allows it)."""
    for name, (choices, bounds, optional) in _declared(type(settings)).items():
        value = getattr(settings, name)
        if value is None and optional:
            continue
        if choices is not None and value not in choices:
            raise ValueError(f"{name} must be one of {choices}, got {value!r}")
        within = isinstance(value, (int, float)) and all(compare(value, bound) for _, compare, bound in bounds)
        if bounds and not within:
            raise ValueError(f"{name} must be {' and '.join(f'{s} {b}' for s, _, b in bounds)}, got {value!r}")
