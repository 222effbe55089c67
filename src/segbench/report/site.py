"""``build_site``: results/<dataset>.json files -> a static, offline leaderboard site.

Every number on a page is read from the results JSON; nothing is recomputed here. plotly's JavaScript
is written once into the site folder, so pages work offline (no CDN). Same inputs, byte-identical pages.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from plotly.offline import get_plotlyjs

from segbench.io import write_text_atomic
from segbench.stats.results import read_results

from . import pages
from .assets import CSS, JS


def build_site(results_files: list[Path], out_dir: Path, calibration: Path | None = None, interactive_site: Path | None = None) -> list[Path]:
    """Write index, methodology, one page per dataset and per dataset structure, and with ``calibration`` (the audit's
    audit.json) the calibration page; return the pages written. ``interactive_site``: the folder the interactive
    pipeline writes its site to (it need not exist yet), linked from the index by a relative address."""
    out_dir = Path(out_dir)
    interactive = Path(os.path.relpath(Path(interactive_site) / "index.html", out_dir)).as_posix() if interactive_site else None
    all_results = [read_results(p) for p in sorted(results_files)]
    all_results.sort(key=lambda r: r["dataset"]["name"])
    write_text_atomic(out_dir / "plotly.min.js", get_plotlyjs())
    write_text_atomic(out_dir / "site.css", CSS)
    write_text_atomic(out_dir / "site.js", JS)
    written = {
        "index.html": pages.index_page(all_results, calibration is not None, interactive),
        "methodology.html": pages.methodology_page(all_results),
    }
    if calibration is not None:
        written[pages.CALIBRATION_PAGE] = pages.calibration_page(json.loads(Path(calibration).read_text(encoding="utf-8")), all_results)
    for results in all_results:
        written[pages.dataset_page_name(results)] = pages.dataset_page(results, all_results)
        for structure in sorted(results["analysis"]["structures"]):
            written[pages.structure_page_name(results, structure)] = pages.structure_page(results, structure, all_results)
    for name, text in written.items():
        write_text_atomic(out_dir / name, text)
    return [out_dir / name for name in written]
