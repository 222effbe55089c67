"""The calibration section's schema: the ``calibration:`` block (calibration/dvc.yaml, docs/methodology.md "Calibration
audit") checked into a ``CalibrationConfig``: its own population dataset, simulated models of known quality, the
sizes of the audit's draws, and the published sets audited as real populations. ``assembly/calibration.py`` and
``stats/calibration.py`` run the audit it describes.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from segbench.base.schema import ConfigError, require
from segbench.datasets.schema import DatasetConfig, parse_dataset
from segbench.models.schema import simulated_parser
from segbench.published.schema import PublishedConfig, parse_published
from segbench.scoring.settings import HIGHER_IS_BETTER


@dataclass(frozen=True)
class CalibrationConfig:
    """The calibration audit (calibration/dvc.yaml, docs/methodology.md "Calibration audit"): simulated models of known
    quality on every reference label map of ``dataset``, and how the audit redraws cases from them."""

    dataset: str
    #: the dataset whose label maps are the population (``calibration.population``: composed from conf/dataset/ on its
    #: own, so the audit does not depend on which datasets an experiment selects)
    population: DatasetConfig
    #: model name -> the simulated model's options (``python -m segbench.models.simulated`` flags), in order
    models: dict[str, tuple[str, ...]]
    #: models of equal true quality (same error distribution, different seeds): every pair among them is a true null
    equal: tuple[str, ...]
    structures: tuple[str, ...]
    metrics: dict[str, bool]
    n_cases: tuple[int, ...]
    draws: int
    #: the Wilcoxon map's type-I error and power come from the first this many draws (its exact test runs pair by pair)
    wilcoxon_draws: int
    n_resamples: int
    seed: int
    workers: int
    #: published real models' scores audited beside the simulated ones (``calibration.real``), by source name
    real: dict[str, RealPopulationConfig] = field(default_factory=dict)
    #: the failure-shape audit (``calibration.shapes``; ``segbench.stats.shapes``); None: not run
    shapes: ShapesConfig | None = None


@dataclass(frozen=True)
class ShapesConfig:
    """The failure-shape audit (docs/methodology.md#520-failure-shapes): equal-mean populations whose models fail
    differently (synthetic, and real pairs centred to no difference), ``draws`` samples per n of the synthetic ones,
    ``real_draws`` of each real pair, ``power_draws`` of each graded population."""

    n_cases: tuple[int, ...]
    draws: int
    real_draws: int
    power_draws: int


@dataclass(frozen=True)
class RealPopulationConfig:
    """A published set audited as populations (``segbench.stats.calibration.ranked_populations``): per structure, the
    models at ``ranks`` of the mean of its first metric, the first two made equal; ``draws`` samples per n."""

    source: PublishedConfig
    ranks: tuple[int, ...]
    draws: int
    wilcoxon_draws: int


def parse_calibration(raw: dict[str, Any], root: Path) -> CalibrationConfig:
    """Validate the ``calibration:`` block: its own population dataset (composed into ``calibration.population`` whatever
    datasets the experiment selects), simulated-model options the simulator accepts, sane sizes."""
    where = "params: calibration"
    dataset = str(require(raw, "dataset", where))
    population = dict(require(raw, "population", where))
    if dataset not in population:
        raise ConfigError(f"{where}.dataset {dataset!r} is not in {where}.population ({sorted(population)})")
    datasets = {dataset: parse_dataset(dataset, population[dataset], root)}
    models = {}
    for name, options in dict(require(raw, "models", where)).items():
        argv = tuple(arg for key, value in dict(options).items() for arg in (f"--{key.replace('_', '-')}", str(value)))
        parser = simulated_parser()
        parser.exit_on_error = False
        try:
            parser.parse_args(["--input", ".", "--output", ".", "--cases", ".", *argv])
        except (argparse.ArgumentError, SystemExit) as exc:
            raise ConfigError(f"{where}.models.{name}: options {dict(options)} are not simulated-model options ({exc})") from exc
        models[str(name)] = argv
    equal = tuple(str(m) for m in require(raw, "equal", where))
    if len(equal) < 2 or not set(equal) <= set(models):
        raise ConfigError(f"{where}.equal must name at least two of its models {sorted(models)}, got {list(equal)}")
    regions = {r.name for r in datasets[dataset].regions}
    structures = tuple(str(s) for s in require(raw, "structures", where))
    if not structures or not set(structures) <= regions:
        raise ConfigError(f"{where}.structures {list(structures)} must be regions of dataset {dataset!r} ({sorted(regions)})")
    metrics = [str(m) for m in require(raw, "metrics", where)]
    if not metrics or not set(metrics) <= set(HIGHER_IS_BETTER):
        raise ConfigError(f"{where}.metrics {metrics} must be scored metrics ({sorted(HIGHER_IS_BETTER)})")
    sizes = {}
    for key in ("draws", "wilcoxon_draws", "n_resamples", "workers"):
        sizes[key] = require(raw, key, where)
        if isinstance(sizes[key], bool) or not isinstance(sizes[key], int) or sizes[key] < 1:
            raise ConfigError(f"{where}.{key} must be a positive integer, got {sizes[key]!r}")
    n_cases = tuple(require(raw, "n_cases", where))
    if not n_cases or any(isinstance(n, bool) or not isinstance(n, int) or n < 3 for n in n_cases):
        raise ConfigError(f"{where}.n_cases must list integers >= 3, got {list(n_cases)}")
    seed = require(raw, "seed", where)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"{where}.seed must be an integer >= 0, got {seed!r}")
    return CalibrationConfig(
        dataset=dataset,
        population=datasets[dataset],
        models=models,
        equal=equal,
        structures=structures,
        metrics={m: HIGHER_IS_BETTER[m] for m in metrics},
        n_cases=n_cases,
        seed=seed,
        **sizes,
        real=_real_populations(raw.get("real") or {}, raw.get("published") or {}, root, where),
        shapes=_shapes(raw.get("shapes"), where),
    )


def _shapes(raw: Any, where: str) -> ShapesConfig | None:
    """``calibration.shapes``: its sample sizes (integers >= 3) and draws (positive integers); absent: None."""
    if raw is None:
        return None
    keys = {"n_cases", "draws", "real_draws", "power_draws"}
    if not isinstance(raw, dict) or set(raw) != keys:
        raise ConfigError(f"{where}.shapes: expected {{{', '.join(sorted(keys))}}}, got {raw!r}")
    n_cases = raw["n_cases"]
    if not isinstance(n_cases, list) or not n_cases or any(isinstance(n, bool) or not isinstance(n, int) or n < 3 for n in n_cases):
        raise ConfigError(f"{where}.shapes.n_cases must list integers >= 3, got {n_cases!r}")
    for key in ("draws", "real_draws", "power_draws"):
        if isinstance(raw[key], bool) or not isinstance(raw[key], int) or raw[key] < 1:
            raise ConfigError(f"{where}.shapes.{key} must be a positive integer, got {raw[key]!r}")
    return ShapesConfig(tuple(n_cases), raw["draws"], raw["real_draws"], raw["power_draws"])


def _real_populations(raw: Any, published: Any, root: Path, where: str) -> dict[str, RealPopulationConfig]:
    """``calibration.real``: per published set of ``calibration.published`` (composed from conf/published/ on its own),
    the ranks of the models it audits (at least 3 distinct, from 1) and its draws."""
    if not isinstance(raw, dict) or not isinstance(published, dict):
        raise ConfigError(f"{where}.real and {where}.published must be mappings, got {raw!r} and {type(published).__name__}")
    out = {}
    for name, spec in raw.items():
        at = f"{where}.real.{name}"
        if name not in published:
            raise ConfigError(f"{at}: not a published set of {where}.published ({sorted(published)})")
        if not isinstance(spec, dict) or set(spec) != {"ranks", "draws", "wilcoxon_draws"}:
            raise ConfigError(f"{at}: expected {{ranks, draws, wilcoxon_draws}}, got {spec!r}")
        ranks = spec["ranks"]
        if (
            not isinstance(ranks, list)
            or len(ranks) < 3
            or len(set(ranks)) != len(ranks)
            or any(isinstance(r, bool) or not isinstance(r, int) or r < 1 for r in ranks)
        ):
            raise ConfigError(f"{at}.ranks must list at least 3 distinct integers >= 1 (the first two: the equal pair), got {ranks!r}")
        for key in ("draws", "wilcoxon_draws"):
            if isinstance(spec[key], bool) or not isinstance(spec[key], int) or spec[key] < 1:
                raise ConfigError(f"{at}.{key} must be a positive integer, got {spec[key]!r}")
        out[str(name)] = RealPopulationConfig(parse_published(str(name), published[name], root), tuple(ranks), spec["draws"], spec["wilcoxon_draws"])
    return out
