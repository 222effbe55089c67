"""Cross-dataset stage (``segbench cross-dataset``): every pair of real boards in results/ that rank the same models on a
structure and metric, side by side (``segbench.stats.crossdataset``; docs/methodology.md#522-one-model-two-datasets),
written to one JSON the report stage draws its page from."""

from __future__ import annotations

import logging
from itertools import combinations
from pathlib import Path
from typing import Any

import yaml

from segbench.assembly.crossdataset import cross_pair
from segbench.base.io import write_json_atomic
from segbench.report.boards import is_simulated
from segbench.stats.results_file import read_results

log = logging.getLogger(__name__)

#: the keys of conf/cross_dataset.yaml
CONFIG_KEYS = ("aliases", "n_resamples", "confidence", "seed")


def read_config(path: Path) -> dict[str, Any]:
    """conf/cross_dataset.yaml checked: ``aliases`` {set: {name there: name across sets}}, ``n_resamples`` (int >= 100),
    ``confidence`` (in (0, 1)), ``seed`` (int); an error names the file, the key and what it takes."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: not a readable YAML file ({exc})") from exc
    if not isinstance(raw, dict) or (unknown := sorted(set(raw) - set(CONFIG_KEYS))):
        raise ValueError(f"{path}: expected a mapping of {', '.join(CONFIG_KEYS)}; unknown {unknown if isinstance(raw, dict) else raw!r}")
    aliases = raw.get("aliases") or {}
    if not isinstance(aliases, dict) or not all(
        isinstance(v, dict) and all(isinstance(k, str) and isinstance(n, str) for k, n in v.items()) for v in aliases.values()
    ):
        raise ValueError(f"{path}: aliases: expected {{set: {{its model name: the name across sets}}}}, got {aliases!r}")
    n_resamples, confidence, seed = raw.get("n_resamples", 2000), raw.get("confidence", 0.95), raw.get("seed", 0)
    if not isinstance(n_resamples, int) or n_resamples < 100:
        raise ValueError(f"{path}: n_resamples: expected an integer of at least 100, got {n_resamples!r}")
    if not isinstance(confidence, float) or not 0.0 < confidence < 1.0:
        raise ValueError(f"{path}: confidence: expected a number between 0 and 1 (e.g. 0.95), got {confidence!r}")
    if not isinstance(seed, int):
        raise ValueError(f"{path}: seed: expected an integer, got {seed!r}")
    return {"aliases": aliases, "n_resamples": n_resamples, "confidence": confidence, "seed": seed}


def run_cross_dataset(results_dir: Path, config: Path, out: Path) -> dict[str, Any]:
    """Compare every pair of real boards of ``results_dir`` (simulated boards are not models one could meet twice) and
    write the view to ``out``; an alias naming a set or model no board has is an error naming it."""
    settings = read_config(config)
    boards = [read_results(p) for p in sorted(Path(results_dir).glob("*.json"))]
    real = [r for r in boards if not is_simulated(r)]
    names = {r["dataset"]["name"]: set(r["models"]) for r in boards}
    for dataset, aliases in settings["aliases"].items():
        unknown = sorted(set(aliases) - names.get(dataset, set()))
        if dataset in names and unknown:
            raise ValueError(f"{config}: aliases.{dataset}: no model {unknown} in results/{dataset}.json (it has {sorted(names[dataset])})")
    pairs = [
        pair
        for a, b in combinations(sorted(real, key=lambda r: r["dataset"]["name"]), 2)
        if (pair := cross_pair(a, b, settings["aliases"], settings["n_resamples"], settings["confidence"], settings["seed"]))
    ]
    view = {"settings": settings, "boards": sorted(names), "pairs": pairs}
    write_json_atomic(Path(out), view)
    log.info("cross-dataset: %d pair(s) of real boards sharing models: %s", len(pairs), ", ".join(f"{p['a']} x {p['b']}" for p in pairs))
    return view
