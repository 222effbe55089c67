"""What a score bundle's run record carries (docs/methodology.md#12-what-an-mlflow-run-carries): its tags and headline
means, as the score, import and interact stages write them (``tracking.ScoreBundle.write``) and the track stage logs;
for a published set also what compare needs of the set's files (``published_record``), read back from the runs
(``published_facts``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

import segbench
from segbench.base.formats import base_digits, unit
from segbench.datasets.cases import data_version

#: the run tag naming the lesion profile a bundle's lesion-wise tables were scored under (compare checks every model has one)
LESION_PROFILE_TAG = "segbench.lesion_profile"
#: the run record's section of a published set's bundle (import stage), what compare needs of the set's files: the set's
#: ``import_summary`` (``published.import_summary``) and, for segauge results, its ``source_analysis`` (the analysis the
#: file publishes, ``published_segauge.read_segauge_analysis``), a copy of each in every model's bundle; and ``claims``,
#: what the file declares of the model when it declares anything (segauge results: ``licence`` and ``contaminated_on``)
PUBLISHED_SECTION = "published"
#: the claims of a model compare reads (the model's version is its run's tag ``segbench.model_version``)
CLAIMS = ("licence", "contaminated_on")
#: the set's own facts, the same copy in every model's bundle, in the words an error names them by
SET_FACTS = {"import_summary": "import summaries", "source_analysis": "published analyses"}


def shown_mean(values: pd.Series, present: np.ndarray, metric: str) -> float:
    """The mean of ``values`` over the ``present`` cases, rounded as every view prints a mean without its CI
    (``segbench.base.formats.base_digits``): an MLflow run's headline, which MLflow's runs table would show to 16 digits."""
    return round(float(values.to_numpy(dtype=np.float64)[present].mean()), base_digits(unit(metric) != "mm"))


def headline_metrics(rows: pd.DataFrame, metrics: Iterable[str]) -> dict[str, dict[str, float]]:
    """Per model, its MLflow run's headline metrics: ``<structure>.<metric>.mean`` over the cases whose reference has
    the structure, rounded as printed (``shown_mean``), ``<structure>.n_cases`` (those cases) and
    ``<structure>.n_absent`` (the others).

    Plain means, no statistics settings: a change of ``stats`` must not rerun scoring. CIs, ranks and verdicts
    are leaderboard statistics, logged by compare with the leaderboard run (docs/methodology.md#12-what-an-mlflow-run-carries).
    """
    summary: dict[str, dict[str, float]] = {}
    for (model, structure), group in rows.groupby(["model", "structure"], sort=True):
        present = group["reference_present"].to_numpy(dtype=bool)
        values = summary.setdefault(str(model), {})
        values.update({f"{structure}.{m}.mean": shown_mean(group[m], present, m) for m in metrics if present.any()})
        values[f"{structure}.n_cases"] = int(group["case_id"][present].nunique())
        values[f"{structure}.n_absent"] = int(group["case_id"][~present].nunique())
    return summary


def version_tags(dataset: str, model: str, kind: str, data: str | None = None, **extra: str) -> dict[str, str]:
    """The tags every MLflow run carries (docs/methodology.md#12-what-an-mlflow-run-carries): names, kind and the
    versions of everything used; ``data``: the version of the scored files when they are not the data bundle (a
    published set's own files).

    Only what the outputs depend on: the git commit is not here (the score bundle is a DVC output that
    must not change with every commit); tracking records it on the MLflow run when logging.
    """
    import segauge

    return {
        "segbench.dataset": dataset,
        "segbench.model": model,
        "segbench.kind": kind,
        "segbench.dataset_version": data or data_version(),
        "segbench.segauge_version": segauge.__version__,
        "segbench.segbench_version": segbench.__version__,
        **{f"segbench.{k}": v for k, v in extra.items()},
    }


@dataclass(frozen=True)
class PublishedFacts:
    """What compare needs of a published set besides its rows, read back from its models' run records: the set's import
    summary, the analysis its file publishes (None: it publishes none) and each model's claims (empty: none declared)."""

    import_summary: dict[str, Any]
    source_analysis: dict[str, Any] | None
    claims: dict[str, dict[str, Any]]


def published_record(summary: Mapping[str, Any], claims: Mapping[str, Any] | None, source_analysis: Mapping[str, Any] | None) -> dict[str, Any]:
    """A published set's section of one model's run record: the set's import summary and the analysis its file publishes
    (when it publishes one) and, when the file declares any, the model's ``CLAIMS``. Compare takes them from the model
    runs it reads, never from the set's files again."""
    section: dict[str, Any] = {"import_summary": dict(summary)}
    if source_analysis is not None:
        section["source_analysis"] = dict(source_analysis)
    if claims is not None:
        section["claims"] = {key: claims[key] for key in CLAIMS if key in claims}
    return section


def published_facts(name: str, records: Mapping[str, Mapping[str, Any]]) -> PublishedFacts:
    """Published set ``name``'s facts from the run records of its models (model -> record, as ``tracking.read_runs``
    reads them back).

    Every model's bundle carries the set's import summary and published analysis: one import writes them all, so the
    copies are equal. Copies that differ (runs of two imports of the set, e.g. a marker left from an earlier one) or a
    record without the summary (a bundle imported before records carried it) are an error naming the models and the
    stages that write them again."""
    fix = f"rerun the set's import and track stages (`dvc repro -f -s import@{name}`, then `dvc repro compare-published@{name}`)"
    if not records:
        raise ValueError(f"published set {name!r}: no model run to read (no track marker under tracking/{name}/); {fix}")
    sections = {model: dict(record.get(PUBLISHED_SECTION, {})) for model, record in sorted(records.items())}
    lacking = [model for model, section in sections.items() if "import_summary" not in section]
    if lacking:
        raise ValueError(f"published set {name!r}: the run record of {', '.join(map(repr, lacking))} holds no import summary; {fix}")
    first = next(iter(sections))
    for key, what in SET_FACTS.items():
        differ = [model for model, section in sections.items() if section.get(key) != sections[first].get(key)]
        if differ:
            ours, theirs = sections[first].get(key) or {}, sections[differ[0]].get(key) or {}
            fields = sorted(field for field in ours.keys() | theirs.keys() if ours.get(field) != theirs.get(field))
            raise ValueError(
                f"published set {name!r}: the {what} of the models' runs differ ({first!r} against {', '.join(map(repr, differ))}, "
                f"in {', '.join(fields)}): they come from different imports of the set; {fix}"
            )
    return PublishedFacts(
        import_summary=sections[first]["import_summary"],
        source_analysis=sections[first].get("source_analysis"),
        claims={model: dict(section.get("claims", {})) for model, section in sections.items()},
    )
