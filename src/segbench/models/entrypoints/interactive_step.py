"""The step contract of ``segbench interact`` as seen from inside a model's own environment (numpy only).

Imported by the promptable models' entry points that sit beside it (``<model>_interactive.py``, run
by the model environment's Python, never imported by segbench). One call = one step: read the step
npz (``imgs``, ``spacing``, optional ``boxes``; from the first click step on ``clicks``,
``clicks_order`` and ``prev_pred``; docs/interactive.md), segment every class, write ``segs``.

Conventions every adapter shares, so that they differ only in how their model consumes prompts:

* arrays and clicks are (z, y, x); class ``c`` (1..C) owns ``boxes[c - 1]`` and ``clicks[c - 1]``;
* a class's clicks are replayed in the order they were given (``clicks_order``; a ``None`` entry is
  a round in which that class got no click because it had no error);
* a click step in which a class got no new click keeps that class's ``prev_pred`` voxels: the
  harness only withholds a click when the previous prediction of that class equals the reference;
* classes are written in ascending order, a later class overwriting an earlier one where their
  masks overlap (as the challenge baselines do).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BOX_KEYS = ("z_min", "z_max", "z_mid", "z_mid_y_min", "z_mid_y_max", "z_mid_x_min", "z_mid_x_max")


@dataclass(frozen=True)
class Click:
    """One click of a class: 'fg' or 'bg', its voxel (z, y, x) and the click round (0 = first click step)."""

    kind: str
    zyx: tuple[int, int, int]
    round: int

    @property
    def positive(self) -> bool:
        return self.kind == "fg"


@dataclass(frozen=True)
class Step:
    """One step's input, parsed: per class its box (or None) and its clicks in the order given."""

    imgs: np.ndarray
    spacing: tuple[float, float, float]
    boxes: list[dict[str, int]] | None
    clicks: list[list[Click]]
    rounds: int
    prev_pred: np.ndarray | None

    @property
    def n_classes(self) -> int:
        return len(self.boxes) if self.boxes is not None else len(self.clicks)

    def box(self, c: int) -> dict[str, int] | None:
        return None if self.boxes is None else self.boxes[c - 1]

    def class_clicks(self, c: int) -> list[Click]:
        return self.clicks[c - 1] if self.clicks else []

    def new_click(self, c: int) -> Click | None:
        """The click class ``c`` got in this step (None in the box step or when it had no error)."""
        return next((k for k in self.class_clicks(c) if k.round == self.rounds - 1), None)

    def keeps_previous(self, c: int) -> bool:
        """True in a click step where class ``c`` got no new click: its previous voxels stand."""
        return self.rounds > 0 and self.new_click(c) is None

    def previous(self, c: int) -> np.ndarray:
        """Class ``c`` of ``prev_pred`` as a boolean mask (all False in the box step)."""
        if self.prev_pred is None:
            return np.zeros(self.imgs.shape, dtype=bool)
        return self.prev_pred == c


class StepError(ValueError):
    """A step file that does not follow the contract."""


def _ordered_clicks(entry: dict, order: list, where: str) -> list[Click]:
    """A class's clicks in the order given: ``clicks_order`` says which list ('fg' or 'bg') each round drew from."""
    queues = {kind: [tuple(int(v) for v in p) for p in entry.get(kind, [])] for kind in ("fg", "bg")}
    out = []
    for rnd, kind in enumerate(order):
        if kind is None:
            continue
        if kind not in queues or not queues[kind]:
            raise StepError(f"{where}: clicks_order names a {kind!r} click that 'clicks' does not hold")
        out.append(Click(str(kind), queues[kind].pop(0), rnd))  # type: ignore[arg-type]
    if any(queues.values()):
        raise StepError(f"{where}: 'clicks' holds clicks that clicks_order does not name")
    return out


def read_step(path: Path) -> Step:
    """Parse one step input file."""
    with np.load(path, allow_pickle=True) as data:
        raw = dict(data)
    if "imgs" not in raw or "spacing" not in raw:
        raise StepError(f"{path}: keys 'imgs' and 'spacing' are required (has {sorted(raw)})")
    imgs = np.asarray(raw["imgs"])
    if imgs.ndim != 3:
        raise StepError(f"{path}: 'imgs' must be a 3D volume (z, y, x), got shape {imgs.shape}")
    boxes = None
    if "boxes" in raw:
        boxes = [dict(b) for b in np.asarray(raw["boxes"], dtype=object).reshape(-1)]
        for i, b in enumerate(boxes):
            if missing := [k for k in BOX_KEYS if k not in b]:
                raise StepError(f"{path}: box of class {i + 1} lacks {missing}")
        boxes = [{k: int(b[k]) for k in BOX_KEYS} for b in boxes]
    clicks: list[list[Click]] = []
    rounds = 0
    prev_pred = None
    if "clicks" in raw:
        entries = list(np.asarray(raw["clicks"], dtype=object).reshape(-1))
        orders = [list(o) for o in np.asarray(raw["clicks_order"], dtype=object).reshape(len(entries), -1)]
        clicks = [_ordered_clicks(e, o, f"{path}: class {i + 1}") for i, (e, o) in enumerate(zip(entries, orders, strict=True))]
        rounds = len(orders[0]) if orders else 0
        prev_pred = np.asarray(raw["prev_pred"]) if "prev_pred" in raw else None
        if prev_pred is not None and prev_pred.shape != imgs.shape:
            raise StepError(f"{path}: 'prev_pred' has shape {prev_pred.shape}, 'imgs' {imgs.shape}")
    if boxes is None and not clicks:
        raise StepError(f"{path}: neither 'boxes' nor 'clicks': no prompt to segment")
    spacing = tuple(float(s) for s in np.asarray(raw["spacing"], dtype=float).reshape(-1))
    return Step(imgs, spacing, boxes, clicks, rounds, prev_pred)  # type: ignore[arg-type]


def box_centre(box: dict[str, int]) -> tuple[int, int, int]:
    """The voxel (z, y, x) at the centre of a box on its slice z_mid."""
    return box["z_mid"], (box["z_mid_y_min"] + box["z_mid_y_max"]) // 2, (box["z_mid_x_min"] + box["z_mid_x_max"]) // 2


def assemble(step: Step, segment: Callable[[int], np.ndarray]) -> np.ndarray:
    """The label map: ``segment(c)`` (a boolean mask) for every class that needs the model, ``prev_pred`` for the others."""
    segs = np.zeros(step.imgs.shape, dtype=np.uint8)
    for c in range(1, step.n_classes + 1):
        mask = step.previous(c) if step.keeps_previous(c) else np.asarray(segment(c), dtype=bool)
        if mask.shape != segs.shape:
            raise StepError(f"class {c}: the model returned a mask of shape {mask.shape} for a volume of shape {segs.shape}")
        segs[mask] = c
    return segs


def write_segs(target: Path, segs: np.ndarray) -> None:
    """``segs`` as uint8, written atomically (a stopped call leaves no truncated output)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial.npz")
    np.savez_compressed(partial, segs=np.asarray(segs, dtype=np.uint8))
    os.replace(partial, target)


def run(
    description: str,
    predict: Callable[[Step, argparse.Namespace], np.ndarray],
    add_arguments: Callable[[argparse.ArgumentParser], None],
    argv: list[str] | None = None,
) -> int:
    """Command line of an entry point: ``--input``, ``--output`` and the model's own arguments."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--input", required=True, type=Path, help="step input npz (docs/interactive.md)")
    parser.add_argument("--output", required=True, type=Path, help="output npz with key segs")
    add_arguments(parser)
    args = parser.parse_args(argv)
    step = read_step(args.input)
    write_segs(args.output, predict(step, args))
    return 0
