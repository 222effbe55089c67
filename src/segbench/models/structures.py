"""Canonical structure names and how a dataset's structures are composed from a model's.

Models and datasets name structures differently and at different granularity: TotalSegmentator
segments ``kidney_left`` and ``kidney_right``, KiTS scores one ``kidney``. Every model's
``label_map`` (native id -> name) and every dataset's ``labels`` (name -> id) use the canonical
vocabulary below: TotalSegmentator v2's class names (the largest public CT vocabulary, see
``totalsegmentator/map_to_binary.py``) plus the composites listed in :data:`COMPOSITES`.

A dataset structure is *segmented* by a model when the model labels it directly, or labels every
one of its parts (recursively). A model labelling only some parts (e.g. ``prostate`` but not
``uterus`` for AMOS' ``prostate_or_uterus``) does not segment it: scoring the half it knows against
the whole reference would publish a number that measures the mapping, not the model. Such a
structure is *not applicable* to that model (n/a), never a worst-case zero.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from segbench.models.vocabulary import LESION_NAMES, TOTALSEGMENTATOR_NAMES

#: Composite structure -> its parts, all canonical names. KiTS' ``tumor`` and ``cyst`` are renal.
COMPOSITES: dict[str, tuple[str, ...]] = {
    "kidney": ("kidney_left", "kidney_right"),
    "cyst": ("kidney_cyst",),
    "kidney_cyst": ("kidney_cyst_left", "kidney_cyst_right"),
    "adrenal_gland": ("adrenal_gland_left", "adrenal_gland_right"),
    "lung_left": ("lung_upper_lobe_left", "lung_lower_lobe_left"),
    "lung_right": ("lung_upper_lobe_right", "lung_middle_lobe_right", "lung_lower_lobe_right"),
    "lung": ("lung_left", "lung_right"),
    "thyroid_gland": ("thyroid_left", "thyroid_right"),
    "prostate_or_uterus": ("prostate", "uterus"),
    "heart": ("heart_myocardium", "heart_atrium_left", "heart_ventricle_left", "heart_atrium_right", "heart_ventricle_right"),
}

#: Every name a model's ``label_map`` or a dataset's ``labels`` may use.
CANONICAL_NAMES: frozenset[str] = TOTALSEGMENTATOR_NAMES | LESION_NAMES | set(COMPOSITES) | {p for ps in COMPOSITES.values() for p in ps}


class StructureError(ValueError):
    """A model/dataset pairing whose structure names cannot be mapped unambiguously."""


def sources(structure: str, model_names: set[str]) -> tuple[str, ...] | None:
    """The model's structure names that together make ``structure``, or None if it does not segment it.

    A direct label wins over composing parts; otherwise every part must itself be segmented.
    """
    if structure in model_names:
        return (structure,)
    parts = COMPOSITES.get(structure)
    if not parts:
        return None
    found: list[str] = []
    for part in parts:
        sub = sources(part, model_names)
        if sub is None:
            return None
        found.extend(sub)
    return tuple(found)


def compose(model_names: Iterable[str], dataset_labels: Mapping[str, int], *, where: str) -> dict[str, tuple[str, ...] | None]:
    """For every dataset structure, the model structures composing it (None: not applicable).

    A model structure claimed by two dataset structures (a schema with both ``kidney`` and
    ``kidney_left``) is ambiguous and an error naming ``where``.
    """
    names = set(model_names)
    result = {structure: sources(structure, names) for structure in dataset_labels}
    claimed: dict[str, str] = {}
    for structure, parts in result.items():
        for part in parts or ():
            if part in claimed:
                raise StructureError(f"{where}: model structure {part!r} would be both {claimed[part]!r} and {structure!r}")
            claimed[part] = structure
    return result


def unknown_names(names: Iterable[str]) -> list[str]:
    """The names outside :data:`CANONICAL_NAMES`, each with the closest canonical ones as a hint."""
    described = []
    for name in sorted(set(names) - CANONICAL_NAMES):
        close = difflib.get_close_matches(name, sorted(CANONICAL_NAMES), n=3)
        described.append(f"{name!r}" + (f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""))
    return described
