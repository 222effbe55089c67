"""Cases stage (``segbench cases``): an interactive dataset's images and references as challenge npz cases
(docs/interactive.md)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from segbench.config.params import Params
from segbench.interactive.cases import convert
from segbench.stages.paths import cases_dir


def run_cases(params: Params, dataset_name: str) -> None:
    """Cases stage: an interactive dataset's images and references as challenge npz cases (docs/interactive.md)."""
    source = params.interactive_dataset(dataset_name)
    out = cases_dir(dataset_name)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{dataset_name}.") as tmp:
        sources = [(c, Path(os.path.relpath(image)), Path(os.path.relpath(labels))) for c, image, labels in source.sources]
        convert(sources, source.structures, Path(tmp) / "cases", seed=source.seed, reference=source.reference, note=source.note)
        shutil.rmtree(out, ignore_errors=True)
        (Path(tmp) / "cases").rename(out)
