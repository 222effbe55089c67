"""Fields of a parsed JSON document read with their type checked: a wrong or missing field is a ValueError naming the file
and the field's path (``file.json: analysis.kidney.dice.pairwise[1].favored``), never a KeyError or a silent coercion.
A bool is no number (JSON's ``true`` is not 1).
"""

from __future__ import annotations

import math
from typing import Any


def field_path(where: str, key: str) -> str:
    """Field path for messages: 'file.json: config.seed', 'file.json: models'."""
    return f"{where} {key}" if where.endswith(":") else f"{where}.{key}"


def field(block: object, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """``block[key]`` of the given JSON type, or ValueError naming the field (a bool is no number)."""
    if not isinstance(block, dict) or key not in block:
        raise ValueError(f"{field_path(where, key)}: missing")
    value = block[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise ValueError(f"{field_path(where, key)}: expected {names}, got {value!r}")
    return value


def number(block: object, key: str, where: str) -> float:
    """``block[key]``, a finite number."""
    value = field(block, key, (int, float), where)
    try:
        as_float = float(value)  # an integer too large for a float overflows
    except OverflowError:
        as_float = math.inf
    if not math.isfinite(as_float):
        raise ValueError(f"{field_path(where, key)}: {value!r} is not a finite number")
    return as_float


def integer(block: object, key: str, where: str) -> int:
    """``block[key]``, a non-negative integer (2.0 is 2)."""
    value = number(block, key, where)
    if value != int(value) or value < 0:
        raise ValueError(f"{field_path(where, key)}: {value!r} is not a non-negative integer")
    return int(value)


def probability(block: object, key: str, where: str) -> float:
    """``block[key]``, a number in [0, 1]."""
    value = number(block, key, where)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{field_path(where, key)}: {value!r} is not a probability")
    return value
