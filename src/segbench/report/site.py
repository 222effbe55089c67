"""``build_site``: results/<dataset>.json files -> a static, offline leaderboard site.

Every number on a page is read from the results JSON; nothing is recomputed here. plotly's JavaScript
is written once into the site folder, so pages work offline (no CDN). Same inputs, byte-identical pages.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from plotly.offline import get_plotlyjs

from segbench.base.io import read_json, write_text_atomic
from segbench.stats.results_file import read_results

from . import pages
from .assets import CSS, JS


def build_site(
    results_files: list[Path], out_dir: Path, calibration: Path | None = None, interactive_site: Path | None = None, cross_dataset: Path | None = None
) -> list[Path]:
    """Write index, methodology, one page per dataset and per dataset structure, and with ``calibration`` (the audit's
    audit.json) the calibration page; return the pages written. ``interactive_site``: the folder the interactive
    pipeline writes its site to (it need not exist yet), linked from the index by a relative address. ``cross_dataset``:
    the cross-dataset stage's JSON, drawn as its own page and linked from the index."""
    out_dir = Path(out_dir)
    interactive = Path(os.path.relpath(Path(interactive_site) / "index.html", out_dir)).as_posix() if interactive_site else None
    all_results = [read_results(p) for p in sorted(results_files)]
    all_results.sort(key=lambda r: r["dataset"]["name"])
    written = {
        "index.html": pages.index_page(all_results, calibration is not None, interactive, cross_dataset is not None),
        "methodology.html": pages.methodology_page(all_results),
    }
    if cross_dataset is not None:
        written[pages.CROSS_DATASET_PAGE] = pages.crossdataset_page(read_json(Path(cross_dataset), "cross-dataset JSON"), all_results)
    if calibration is not None:
        written[pages.CALIBRATION_PAGE] = pages.calibration_page(read_audit(Path(calibration)), all_results)
    for results in all_results:
        written[pages.dataset_page_name(results)] = pages.dataset_page(results, all_results)
        for structure in sorted(results["analysis"]["structures"]):
            written[pages.structure_page_name(results, structure)] = pages.structure_page(results, structure, all_results)
    # written once every page is drawn: an input that cannot be drawn leaves the folder as it was
    for name, text in {"plotly.min.js": get_plotlyjs(), "site.css": CSS, "site.js": JS}.items():
        write_text_atomic(out_dir / name, text)
    for name, text in written.items():
        write_text_atomic(out_dir / name, text)
    return [out_dir / name for name in written]


#: the sections of the calibration audit's audit.json the calibration page reads
AUDIT_SECTIONS = ("stats", "population", "coverage", "type1", "power", "models", "draws", "wilcoxon_draws", "n_resamples", "equal", "identical_to_reference")


def read_audit(path: Path) -> dict[str, Any]:
    """The calibration audit's audit.json, checked for the sections the page reads: another file (a results JSON given
    by mistake, a truncated copy) is an error naming it, not a KeyError."""
    audit = read_json(path, "calibration audit JSON")
    missing = [key for key in AUDIT_SECTIONS if not isinstance(audit, dict) or key not in audit]
    if missing:
        raise ValueError(f"{path}: not the calibration audit's audit.json (calibration/results/audit.json): no {', '.join(missing)}")
    return audit
