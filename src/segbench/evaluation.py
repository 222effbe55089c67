"""``segbench evaluate`` and ``segbench.evaluate``: folders of prediction files onto a leaderboard in one step, outside
DVC and MLflow (docs/guide.md#evaluate-a-folder-of-predictions).

The reference folder and each model's prediction folder hold one label map per case, named ``<case><suffix>``
(NIfTI, DICOM-SEG or RTSTRUCT, or a ``.npy`` prediction on the reference's grid). The cases are scored by the engine
(``score_cases``) exactly as the score stage scores them, analysed by ``stats.analyze`` with the pipeline's
settings, and written as the compare stage writes its results (``leaderboard.results_document``): ``segbench show``,
``report``, ``export`` and ``reanalyze`` read the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import math
import os
import re
import stat
import tempfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

import nibabel as nib
import numpy as np
import pandas as pd

from segbench import stats
from segbench.assembly.results_document import analysed_document, regions_block
from segbench.base.bands import level_order
from segbench.base.io import UNREADABLE, save_label_map_atomic, write_json_atomic, write_text_atomic
from segbench.config.params import dataset_from_conf
from segbench.datasets.cases import load_metadata
from segbench.datasets.schema import DatasetConfig
from segbench.models import intake
from segbench.models.schema import ModelConfig
from segbench.scoring.engine import ANALYZED_METRICS, score_cases
from segbench.scoring.geometry import GeometryError, resample_to_reference
from segbench.scoring.labelmaps import load_label_map, load_nifti, nifti_image, validated_labels
from segbench.scoring.settings import DEFAULT_PROFILE, Region
from segbench.stats.results import ResultsDocument

log = logging.getLogger(__name__)

#: the file names of label maps, longest first (``a.nii.gz`` is case ``a``)
SUFFIXES = (".nii.gz", ".nii", ".npy", ".dcm")
#: a region's NSD tolerance when nothing states one (a dataset config's default)
DEFAULT_NSD_TOLERANCE_MM = 2.0
#: what a missing prediction does: stop naming the cases, or score it as a failure (flagged ``prediction_missing``) and
#: apply that coverage policy (``stats.coverage``: own_cases, worst_case, shared_cases; docs/methodology.md#41-coverage)
MISSING_POLICIES = ("error", *stats.COVERAGE_POLICIES)
#: the DICOM modalities that are label maps (others, e.g. CT, are the slices an RTSTRUCT is drawn on)
SEGMENTATION_MODALITIES = ("SEG", "RTSTRUCT")
PER_CASE_FILE = "per_case.csv"
#: room for a ``.npy`` prediction's header besides its data (numpy writes 128 bytes; it reads at most 10,000)
NPY_HEADER_BYTES = 65_536


def case_files(folder: Path, what: str) -> dict[str, Path]:
    """Case id -> label map file of a trusted ``folder`` (the references): an error names a folder without label maps or
    a case with two files."""
    listed = listed_cases(folder, what)
    if not listed:
        raise FileNotFoundError(f"{what} {folder}: no label maps ({', '.join(SUFFIXES)})")
    for case_id, paths in listed.items():
        if len(paths) > 1:
            raise ValueError(f"{what} {folder}: {_two_files(case_id, paths)}")
    return {case_id: paths[0] for case_id, paths in listed.items()}


def listed_cases(folder: Path, what: str, *, untrusted: bool = False) -> dict[str, list[Path]]:
    """Case id -> the label map files of ``folder`` named for it (DICOM files other than SEG and RTSTRUCT, e.g. the series
    an RTSTRUCT is drawn on, are not cases; names starting with a dot are not either); an error names a missing folder.

    ``untrusted`` (a model's predictions): names are not followed. Every entry but a folder and a DICOM image is a case's
    file, a symlink, hard link, FIFO, device or unreadable ``.dcm`` included, for the staging to refuse with its reason
    before a byte of it is scored (a ``.dcm``'s header is read to tell an image only when it is a regular file with one
    link, :func:`_is_image_slice`). A case with two files is the caller's to refuse: for a model that is one unscoreable
    case, not a stop for every model."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{what} {folder}: no such folder")
    found: dict[str, list[Path]] = {}
    for path in sorted(folder.iterdir()):
        suffix = next((s for s in SUFFIXES if path.name.lower().endswith(s)), None)
        if suffix is None or path.name.startswith("."):
            continue
        if untrusted:
            info = os.lstat(path)
            regular = stat.S_ISREG(info.st_mode) and info.st_nlink == 1
            if stat.S_ISDIR(info.st_mode) or (suffix == ".dcm" and regular and _is_image_slice(path)):
                continue
        elif not path.is_file() or (suffix == ".dcm" and not _is_segmentation(path)):
            continue
        found.setdefault(path.name[: -len(suffix)], []).append(path)
    return found


def _two_files(case_id: str, paths: Sequence[Path]) -> str:
    """The error of a case named by more than one file: which one is the case's cannot be told."""
    return f"case {case_id} has {len(paths)} files, {' and '.join(p.name for p in paths)}; which one is its label map cannot be told"


def _is_segmentation(path: Path) -> bool:
    modality = _dicom_modality(path)
    if modality is None:
        raise ValueError(f"{path}: not a DICOM file (no DICM preamble)")
    return modality in SEGMENTATION_MODALITIES


def _is_image_slice(path: Path) -> bool:
    """A team's ``.dcm`` that reads as a DICOM image (a slice of the series an RTSTRUCT is drawn on), read through a
    checked descriptor (``intake.open_output``: a name swapped for a FIFO since it was listed cannot hang the read).
    Anything else, an unreadable file included, is a case's file, refused with its reason when it is staged: one
    team's junk file stops no other team."""
    try:
        modality = _dicom_modality(path, untrusted=True)
    except ValueError:  # intake.IntakeError included
        return False
    return modality is not None and modality not in SEGMENTATION_MODALITIES


def _dicom_modality(path: Path, *, untrusted: bool = False) -> str | None:
    """The Modality of a DICOM file, None for a file without the DICOM preamble (a NIfTI); ``untrusted``: read through
    ``intake.open_output``'s checked descriptor."""
    import pydicom

    with intake.open_output(path) if untrusted else open(path, "rb") as stream:
        if stream.read(132)[128:] != b"DICM":
            return None
        stream.seek(0)
        try:
            return pydicom.dcmread(stream, stop_before_pixels=True, specific_tags=["Modality"]).get("Modality")
        except Exception as exc:  # pydicom raises many exception types for a corrupt header
            raise ValueError(f"{path}: cannot read the DICOM header ({type(exc).__name__}: {exc})") from None


def regions(structures: Sequence[str] = (), dataset: DatasetConfig | None = None, labels: Mapping[str, int] | None = None) -> list[Region]:
    """The regions to score: ``structures`` entries are names of the dataset's regions or of the label map's
    structures, or ``NAME=ID[+ID...][:TOLERANCE_MM]`` (e.g. ``mass=2+3:1.13``); none given: every region of the
    dataset, or one per structure of the label map (NSD tolerance ``DEFAULT_NSD_TOLERANCE_MM``)."""
    known = (
        {r.name: r for r in dataset.regions}
        if dataset
        else {name: Region(name, (int(label),), DEFAULT_NSD_TOLERANCE_MM) for name, label in (labels or {}).items() if int(label) != 0}
    )
    if not structures:
        if not known:
            raise ValueError("no structures to score: give --structures NAME=ID ..., --dataset NAME, or a dataset.json label map beside the references")
        return list(known.values())
    out = []
    for entry in structures:
        name, sep, spec = entry.partition("=")
        if not sep:
            if name not in known:
                raise ValueError(f"structure {name!r}: not among {sorted(known) or 'any known structure'}; define it as {name}=LABEL_ID")
            out.append(known[name])
            continue
        ids, _, tolerance = spec.partition(":")
        try:
            label_ids = tuple(sorted(int(i) for i in ids.split("+")))
            tolerance_mm = float(tolerance) if tolerance else (known[name].nsd_tolerance_mm if name in known else DEFAULT_NSD_TOLERANCE_MM)
        except ValueError:
            raise ValueError(f"structure {entry!r}: expected NAME=ID[+ID...][:TOLERANCE_MM], e.g. mass=2+3:1.13") from None
        if not name or 0 in label_ids or not 0 < tolerance_mm < math.inf:
            raise ValueError(f"structure {entry!r}: needs a name, non-zero label ids and a positive tolerance")
        out.append(Region(name, label_ids, tolerance_mm))
    duplicates = sorted({r.name for r in out if [o.name for o in out].count(r.name) > 1})
    if duplicates:
        raise ValueError(f"structures {duplicates} given twice")
    return out


def label_map_file(gt: Path) -> dict[str, int] | None:
    """The structures of an nnU-Net ``dataset.json`` in the reference folder or its parent (name -> label id), else None."""
    for path in (Path(gt) / "dataset.json", Path(gt).parent / "dataset.json"):
        if path.is_file():
            try:
                labels = json.loads(path.read_text(encoding="utf-8"))["labels"]
                return {str(name): int(label) for name, label in labels.items()}
            except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
                raise ValueError(f'{path}: expected an nnU-Net dataset.json with "labels": {{name: id}} ({exc})') from None
    return None


def read_metadata(path: Path, cases: Sequence[str]) -> pd.DataFrame:
    """A metadata CSV's columns (besides ``case_id``) as ``meta.<field>``, indexed by the cases (a case it lacks has none)."""
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    except UNREADABLE as exc:
        raise ValueError(f"{path}: not a readable metadata CSV ({exc})") from None
    if "case_id" not in table.columns:
        raise ValueError(f"{path}: metadata CSV needs a case_id column (has {list(table.columns)})")
    repeated = sorted(set(table["case_id"][table["case_id"].duplicated()]))
    if repeated:
        raise ValueError(f"{path}: case ids listed twice: {repeated[:10]}")
    unknown = sorted(set(table["case_id"]) - set(cases))
    if unknown:
        log.info("%s: %d cases without a reference are not evaluated: %s", path, len(unknown), ", ".join(unknown[:10]))
    return table.set_index("case_id").reindex(list(cases)).rename_axis("case_id").add_prefix("meta.")


def _staged(path: Path, reference: Path, staging: Path, allowed: set[int] | None, dicom_labels: Mapping[str, int] | None) -> Path:
    """The file scored for a team's ``path``: a private copy in ``staging``, never the team's name itself, which the team
    can still swap between the checks and the readers' opens (for a symlink to the reference: a perfect score; for a
    FIFO: a hang). The copy is read through one descriptor checked as a model's output is (``intake.open_output``: a
    regular file with one link, under the size cap, the name not followed). A ``.npy`` becomes NIfTI on the reference's
    grid (a bare array has no geometry: its header must state the reference's shape before anything is read,
    ``intake.read_npy_array``); an RTSTRUCT is drawn on its series (the slices beside ``path`` in the team's folder, each
    read the same way) onto the reference's grid, as the engine resamples any DICOM prediction. The label values of
    both are checked here, so an error names the team's file rather than the staged one."""
    if path.name.lower().endswith(".npy"):
        ref_data, ref_img = load_nifti(reference)
        data = intake.read_npy_array(path, ref_data.shape, kinds="biuf", max_bytes=NPY_HEADER_BYTES + ref_data.size * 8)
        return _staged_nifti(path, validated_labels(path, data), ref_img, staging / f"{path.name[:-4]}.nii.gz", allowed)
    copy = staging / path.name
    _private_copy(path, copy)
    try:
        modality = _dicom_modality(copy)
        if modality is None and path.name.lower().endswith(".dcm"):
            raise ValueError(f"{copy}: not a DICOM file (no DICM preamble)")
        if modality != "RTSTRUCT":
            return copy
        ref_img = nifti_image(reference)
        _, image = load_label_map(copy, dicom_labels=dicom_labels, reference_shape=ref_img.shape[:3], series_folder=path.parent)
    except ValueError as exc:
        raise _named(exc, {str(copy): str(path)}) from None
    drawn = np.asanyarray(resample_to_reference(image, ref_img).dataobj)
    return _staged_nifti(path, drawn, ref_img, staging / f"{path.name}.nii.gz", allowed)


def _staged_nifti(path: Path, labels: np.ndarray, like: nib.Nifti1Image, target: Path, allowed: set[int] | None) -> Path:
    """``labels`` (read from ``path``) written to ``target`` on the grid of ``like``, once their values are label ids."""
    values = {int(v) for v in np.unique(labels)}
    bad = sorted(v for v in values if v < 0 or v > 32767 or (allowed is not None and v not in allowed))
    if bad:
        raise ValueError(f"{path}: label values {bad[:10]} are not {'in the allowed set ' + str(sorted(allowed)) if allowed else 'label ids'}")
    with _staging_write(path, target):
        save_label_map_atomic(target, labels, like)
    return target


def _private_copy(path: Path, target: Path) -> None:
    """``path`` copied to ``target`` through one checked descriptor (``intake.open_output``); a file that grows past the
    size cap, or that cannot be read to its end, is refused."""
    with intake.open_output(path, intake.MAX_FILE_BYTES) as source, _staging_write(path, target), open(target, "xb") as copy:
        copied = 0
        while chunk := _read_chunk(source, path):
            copied += len(chunk)
            if copied > intake.MAX_FILE_BYTES:
                raise intake.IntakeError(f"{path}: grew past the cap of {intake.MAX_FILE_BYTES} bytes while being read; refused")
            copy.write(chunk)


def _read_chunk(source: BinaryIO, path: Path) -> bytes:
    """The next MiB of a team's file; a read that fails is the file's (refused, the team's case), not the staging's."""
    try:
        return source.read(1 << 20)
    except OSError as exc:
        raise intake.IntakeError(f"{path}: cannot be read ({exc.strerror or exc}); refused") from None


@contextlib.contextmanager
def _staging_write(path: Path, target: Path) -> Iterator[None]:
    """Writing ``target``, the private copy of a team's ``path`` in the team's temporary folder: a write that fails there
    (a full disk, a quota) is the organiser's machine's, not the team's file, so it stops the run naming the folder and
    what to do, rather than a bare "[Errno 28] No space left on device"."""
    try:
        yield
    except OSError as exc:
        raise OSError(
            exc.errno,
            f"cannot write the private copy of {path} in {target.parent} ({exc.strerror or exc}): "
            "evaluate keeps a copy of each of a team's predictions in a temporary folder while it scores the team; "
            "point TMPDIR at a disk with room for them",
        ) from None


#: a grid mismatch's message: the two files it compares (segbench.scoring.geometry.check_same_grid)
_GRID_PAIR = re.compile(r"reference (\S+) vs prediction (\S+):")


def grid_difference(reference: Path | str, prediction: Path | str) -> str:
    """What differs between two label maps' grids, read from their headers: orientation (axis codes, so a flip reads as
    one), spacing, origin and shape, each named with both values, and how to fix it."""
    a, b = cast(nib.Nifti1Image, nib.load(str(reference))), cast(nib.Nifti1Image, nib.load(str(prediction)))
    facts = [
        ("orientation", "".join(nib.aff2axcodes(a.affine)), "".join(nib.aff2axcodes(b.affine))),
        ("spacing", tuple(round(float(z), 4) for z in a.header.get_zooms()[:3]), tuple(round(float(z), 4) for z in b.header.get_zooms()[:3])),
        ("origin", tuple(round(float(v), 3) for v in a.affine[:3, 3]), tuple(round(float(v), 3) for v in b.affine[:3, 3])),
        ("shape", tuple(a.shape[:3]), tuple(b.shape[:3])),
    ]
    differ = "; ".join(f"{name} {mine} (prediction) vs {theirs} (reference)" for name, theirs, mine in facts if theirs != mine)
    return (
        f"what differs: {differ or 'the affines, beyond the tolerance'}; fix: save the prediction on the reference's grid, or let "
        "segbench resample it by its affine as the pipeline does (`--label-map ID=STRUCTURE ...` with --dataset, or `--pred-config FILE`)"
    )


def _named(error: Exception, originals: Mapping[str, str]) -> Exception:
    """``error`` with each staged copy's path in its message replaced by the team's file it was staged from (longest
    first: one staged path can begin another); a grid mismatch also says what differs and the fix (``grid_difference``)."""
    text = str(error)
    pair = _GRID_PAIR.search(text) if isinstance(error, GeometryError) else None
    if pair:
        with contextlib.suppress(Exception):  # the mismatch stays reported even if a header cannot be read again
            text = f"{text}; {grid_difference(pair.group(1), pair.group(2))}"
    for staged in sorted((p for p in originals if p in text), key=len, reverse=True):
        text = text.replace(staged, originals[staged])
    if text == str(error):
        return error
    try:
        return type(error)(text)
    except Exception:  # an exception type that takes other arguments
        return ValueError(text)


@dataclass(frozen=True)
class Evaluation:
    """What ``evaluate`` found: the results document (as ``results/<dataset>.json``) and the per-case rows."""

    results: ResultsDocument
    per_case: pd.DataFrame

    def summary(self, width: int = 140, detail: bool = False, cells: bool = False) -> str:
        """The leaderboard as ``segbench show`` prints it: per structure and #1, its cells by verdict; ``cells``: a line
        per cell, #1 with its mean [CI], the verdict and the co-winners (``show --cells``); ``detail``: each cell stacked
        with its verdict's sentence and P(rank 1) (``show --detail``)."""
        from segbench.report.terminal import render

        return render([self.results], width=width, detail=detail, cells=cells)

    def by_subgroup(self, field: str) -> pd.DataFrame:
        """Per structure, metric, group of ``field`` (in their order, ``bands.level_order``) and model: n, whether the
        group was tested, mean, CI and the model's coverage (the share of the cases it has a prediction for); a model
        lacking cases that the board leaves out (coverage ``own_cases``) has its rows from the analysis of its own cases,
        so every model is in the table."""
        from segbench.report.summary import model_coverage

        fields = self.results["analysis"]["subgroup_fields"]
        if field not in fields:
            raise ValueError(f"no subgroup field {field!r}; analysed: {fields or 'none (give --metadata or a dataset with subgroups)'}")
        shares = model_coverage(self.results)
        coverage: Mapping[str, Any] = self.results.get("coverage") or {}
        own = coverage.get("analyses") or {}
        rows = []
        for analysis, only in [(self.results["analysis"], None), *((a, m) for m, a in sorted(own.items()))]:
            for structure, block in sorted(analysis["structures"].items()):
                for metric, cell in block["metrics"].items():
                    groups = (cell.get("subgroups") or {}).get(field, {}).get("groups", {})
                    for group in level_order(field, groups):
                        entry = groups[group]
                        rows += [
                            {
                                "structure": structure,
                                "metric": metric,
                                field: group,
                                "n": entry["n"],
                                "tested": entry["tested"],
                                "model": model,
                                **values,
                                "coverage": shares.get(model),
                            }
                            for model, values in entry["models"].items()
                            if only in (None, model)
                        ]
        columns = ["structure", "metric", field, "n", "tested", "model", "mean", "ci_low", "ci_high", "coverage"]
        return pd.DataFrame(rows, columns=columns).sort_values(["structure", "metric"], kind="stable").reset_index(drop=True)

    def to_json(self, path: Path) -> Path:
        """Write the results document (``segbench show --results``, ``report`` and ``reanalyze`` read it)."""
        write_json_atomic(Path(path), self.results)
        return Path(path)

    def to_html(self, folder: Path) -> Path:
        """Write the leaderboard site (as ``segbench report``) into ``folder``; returns its index page."""
        from segbench.report import build_site

        with tempfile.TemporaryDirectory() as tmp:
            build_site([self.to_json(Path(tmp) / f"{self.results['dataset']['name']}.json")], Path(folder))
        return Path(folder) / "index.html"


def evaluate(
    gt: Path | str,
    predictions: Mapping[str, Path | str],
    *,
    dataset: str | None = None,
    conf: Path | str = Path("conf"),
    structures: Sequence[str] = (),
    metadata: Path | str | None = None,
    profile: str = DEFAULT_PROFILE,
    sensitivity_profiles: Sequence[str] = (),
    missing: str = "error",
    simulated: Collection[str] = (),
    dicom_labels: Mapping[str, int] | None = None,
    settings: stats.StatsSettings | None = None,
    workers: int = 1,
    progress: bool = True,
    name: str | None = None,
    pred_configs: Sequence[Path | str] = (),
    label_map: Mapping[int, str] | None = None,
) -> Evaluation:
    """Score every model's prediction folder against the references in ``gt`` and analyse them together.

    ``pred_configs``: files in the pipeline's ``conf/predictions/<name>.yaml`` form (dataset, path, output, output_format,
    label_map), each one model; ``label_map``: the label ids of every ``predictions`` folder -> the dataset's structure
    names. Either way the folder goes through the predict stage's own intake (:func:`staged_folder`): the same label map,
    the same resampling by affine onto the reference grid, the same checks, so its per-case numbers are the pipeline's.

    ``dataset``: a dataset config (``<conf>/dataset/<dataset>.yaml``) giving the regions, NSD tolerances, allowed
    labels, metadata and subgroups; else ``structures`` or the label map of a ``dataset.json`` beside the references.
    ``missing``: a case without a prediction file, or whose file cannot be scored (refused unread, corrupt, off the
    reference grid, unknown labels), is an error naming the model and cases or the file (``"error"``), or is scored as a
    failure, flagged, named in a warning, and the model lacking cases goes under that coverage policy (``"own_cases"``:
    estimated on its cases beside the board; ``"worst_case"``: ranked with each missing case a failure;
    ``"shared_cases"``: the board on the cases every model has), and a file for a case without a reference is named in a
    warning, not scored. ``simulated``: models marked SIMULATED on every view. ``dicom_labels``: DICOM-SEG segment label / RTSTRUCT ROI name -> label
    id (default: segment / ROI number). ``workers > 1`` scores cases in a process pool, safe from a script without a ``__main__`` guard.
    Every team's folder is checked first (its cases, strays, coverage); then team by team, its files are scored from
    private copies in a temporary folder (under ``TMPDIR``), made through one checked descriptor each (:func:`_staged`)
    and removed once the team is scored: that folder holds one team's predictions at a time, and a write that fails
    there (a full disk) stops the run naming the folder.
    """
    if missing not in MISSING_POLICIES:
        raise ValueError(f"missing={missing!r}: expected one of {MISSING_POLICIES}")
    if pred_configs or label_map:
        options = {
            "conf": conf,
            "structures": structures,
            "metadata": metadata,
            "profile": profile,
            "sensitivity_profiles": sensitivity_profiles,
            "missing": missing,
            "simulated": simulated,
            "dicom_labels": dicom_labels,
            "settings": settings,
            "workers": workers,
            "progress": progress,
            "name": name,
        }
        return _evaluate_through_intake(gt, predictions, dataset, pred_configs, label_map, options)
    _check_folders_request(predictions, simulated, dataset, Path(conf))
    config = dataset_from_conf(Path(conf), dataset, Path(conf).resolve().parent) if dataset else None
    gt_labels = None if config else label_map_file(Path(gt))
    # the label ids a map may hold: the dataset's or the label map's; with neither, the schema is unknown and unchecked
    allowed: set[int] | None = config.region_labels() if config else ({0, *gt_labels.values()} if gt_labels else None)
    chosen = regions(structures, config, gt_labels)
    references, ignored = _configured_references(Path(gt), config)
    cases = sorted(references)
    settings = settings or stats.StatsSettings()
    extra = [p for p in sensitivity_profiles if p != profile]
    # every team's folder is checked before any is scored; then one team at a time is staged and scored, so the
    # temporary folder holds one team's copies, not every prediction of the run
    teams = [(model, folder, *_checked_team(model, Path(folder), references, cases, ignored, missing)) for model, folder in predictions.items()]
    request = _ScoringRequest(references, cases, chosen, allowed, dicom_labels, missing, workers, progress, profile, extra)
    scored = _scored_teams(teams, simulated, request)
    return _analysed(scored, chosen, profile, Path(gt), config, metadata, cases, predictions, simulated, missing, settings, name)


def _check_folders_request(predictions: Mapping[str, Path | str], simulated: Collection[str], dataset: str | None, conf: Path) -> None:
    """Refuse a folders request that names no model, marks a non-model simulated, or names a dataset without a config folder."""
    if not predictions:
        raise ValueError("no prediction folder given (--pred NAME=DIR or --pred-config FILE)")
    unknown = sorted(set(simulated) - set(predictions))
    if unknown:
        raise ValueError(f"simulated names {unknown} are not models (have {sorted(predictions)})")
    if dataset and not (conf / "dataset").is_dir():
        raise FileNotFoundError(
            f"dataset {dataset!r}: {conf.resolve()} is not a segbench config folder (no dataset/ in it): "
            "give conf= (--conf) the project's conf/, or the structures (--structures NAME=ID ...)"
        )


@dataclass(frozen=True)
class _ScoringRequest:
    """What every team of one evaluation is scored with: the references and their cases, the structures, the labels a
    file may hold, the missing-case policy, the pool and the metric profiles."""

    references: Mapping[str, Path]
    cases: Sequence[str]
    chosen: Sequence[Region]
    allowed: set[int] | None
    dicom_labels: Mapping[str, int] | None
    missing: str
    workers: int
    progress: bool
    profile: str
    extra: Sequence[str]


def _scored_teams(
    teams: Sequence[tuple[str, Path | str, dict[str, list[Path]], dict[str, Path]]], simulated: Collection[str], request: _ScoringRequest
) -> pd.DataFrame:
    """Every checked team scored in turn (:func:`_scored_team`, one staging folder at a time), its rows named by model and kind."""
    scored_teams = []
    for model, folder, listed, files in teams:
        if len(teams) > 1:
            log.info("model %s: scoring %d cases", model, len(request.cases))
        scored = _scored_team(model, Path(folder), listed, files, request)
        scored.insert(0, "model", model)
        scored.insert(1, "kind", "simulated" if model in simulated else "predictions")
        scored_teams.append(scored)
    return pd.concat(scored_teams, ignore_index=True)


def _configured_references(gt: Path, config: DatasetConfig | None) -> tuple[dict[str, Path], set[str]]:
    """The NIfTI references of ``gt`` scored on this board (the dataset's configured cases, when it lists them) and the
    case ids of the references left out."""
    references = case_files(gt, "references")
    if any(p.name.lower().endswith((".npy", ".dcm")) for p in references.values()):
        bad = next(p for p in references.values() if p.name.lower().endswith((".npy", ".dcm")))
        raise ValueError(f"{bad}: references must be NIfTI (a .npy has no geometry; convert DICOM references to NIfTI first)")
    ignored: set[str] = set()
    if config is not None and config.cases is not None:  # the dataset's configured cases, not every file of the folder
        ignored = set(references) - set(config.cases)
        references = {c: p for c, p in references.items() if c in config.cases}
        if not references:
            raise ValueError(f"dataset {config.name!r}: none of its {len(config.cases)} configured cases has a reference in {gt}")
        if ignored:
            log.info("dataset %s: the %d of its configured cases in %s (%d other references not scored)", config.name, len(references), gt, len(ignored))
    return references, ignored


def _checked_team(
    model: str, folder: Path, references: Mapping[str, Path], cases: list[str], ignored: set[str], missing: str
) -> tuple[dict[str, list[Path]], dict[str, Path]]:
    """One team's prediction files per case, checked before any team is scored: strays, coverage under ``missing``."""
    listed = listed_cases(folder, f"model {model}: predictions", untrusted=True)
    files = {c: paths[0] for c, paths in listed.items() if c not in ignored}  # a dataset case not configured: not this board's
    listed = {c: paths for c, paths in listed.items() if c not in ignored}
    if not set(files) & set(cases):
        raise ValueError(
            f"model {model}: {folder}: no prediction file for any of the {len(cases)} cases (names like {cases[0]}.nii.gz); "
            "a model with no scored case has no board: check the folder and the file names"
        )
    stray = sorted(set(files) - set(references))
    if stray:
        message = f"model {model}: {folder}: prediction files for cases without a reference: {', '.join(files[c].name for c in stray[:10])}"
        if missing == "error":
            raise ValueError(message)
        log.warning("%s; not scored (coverage policy %s)", message, missing)
    absent = [c for c in cases if c not in files]
    if absent and missing == "error":
        raise ValueError(
            f"model {model}: {folder}: no prediction for {len(absent)} of {len(cases)} cases: {', '.join(absent[:10])}"
            f"{', ...' if len(absent) > 10 else ''} (missing= / --missing own_cases, worst_case or shared_cases: "
            "docs/methodology.md#41-coverage)"
        )
    if absent:
        log.warning("model %s: %d of %d cases have no prediction (coverage policy %s): %s", model, len(absent), len(cases), missing, ", ".join(absent[:10]))
    return listed, files


def _analysed(
    scored: pd.DataFrame,
    chosen: list[Region],
    profile: str,
    gt: Path,
    config: DatasetConfig | None,
    metadata: Path | str | None,
    cases: list[str],
    predictions: Mapping[str, Path | str],
    simulated: Collection[str],
    missing: str,
    settings: stats.StatsSettings,
    name: str | None,
) -> Evaluation:
    """The evaluation of every team's scored rows: the main profile's rows with the cases' metadata, analysed as a board."""
    main = (scored["metric_profile"] == profile).to_numpy()
    if metadata:
        meta = read_metadata(Path(metadata), cases)
    else:
        meta = load_metadata(config, cases) if config else pd.DataFrame(index=pd.Index(cases, name="case_id"))
    rows = scored[main].reset_index(drop=True).join(meta, on="case_id")
    subgroups = [c.removeprefix("meta.") for c in meta.columns] if metadata else list(config.subgroups if config else ())
    board = name or (config.name if config else gt.resolve().name)
    models = {
        m: stats.model_entry(m, "simulated" if m in simulated else "predictions", board, simulated=m in simulated, source=Path(f).resolve().as_posix())
        for m, f in predictions.items()
    }
    block = {
        "name": board,
        "title": f"{config.title if config else board} (segbench evaluate)",
        "licence": config.licence if config else "",
        "citation": config.citation if config else "",
        "regions": regions_block(chosen),
        "source": gt.resolve().as_posix(),
    }
    results, _ = analysed_document(
        block,
        models,
        ANALYZED_METRICS,
        rows,
        scored[~main].reset_index(drop=True),
        settings=settings,
        contaminated=dict.fromkeys(models, False),
        policy="own_cases" if missing == "error" else missing,
        subgroup_fields=subgroups,
        cluster_field=config.cluster_field if config and not metadata else None,
    )
    return Evaluation(results=results, per_case=rows)


def predictions_config(path: Path | str, root: Path) -> ModelConfig:
    """The one model of a ``conf/predictions/<name>.yaml`` file (``models.schema.parse_predictions``; a relative path is
    relative to ``root``); an error names the file and what is wrong."""
    import yaml

    from segbench.models.schema import parse_predictions

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: not a readable predictions config ({exc})") from None
    if not isinstance(raw, dict) or len(raw) != 1:
        raise ValueError(f"{path}: expected one entry, <name>: {{dataset, path, output, output_format, label_map}}, as conf/predictions/ holds")
    ((name, entry),) = raw.items()
    try:
        return parse_predictions(str(name), entry, root)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _faulty(model: str, folder: Path, errors: Mapping[str, str], fix: str) -> ValueError:
    """One error for every faulty file of a folder: the first 10, then how many more, and the fix."""
    shown = "".join(f"\n  {text}" for _, text in sorted(errors.items())[:10])
    more = f"\n  ... and {len(errors) - 10} more" if len(errors) > 10 else ""
    return ValueError(f"model {model}: {len(errors)} file(s) of {folder} cannot be brought onto the references:{shown}{more}\n{fix}")


def staged_folder(model: ModelConfig, dataset: DatasetConfig, cases: Sequence[str], out: Path, where: str) -> Path:
    """``model``'s folder (kind ``predictions``) brought into ``out`` by the predict stage's own intake
    (``models.runner.stage_predictions``): each file checked unread, remapped by the label map and resampled by its affine
    onto the reference grid, case by case. Every faulty file is collected and named (the user's file, not its staged copy)
    in one error saying the fix (``where``: the file or option holding the label map); a case without a file gets none."""
    from segbench.models.runner import REFUSED_FILE, ModelRunError, stage_predictions

    assert model.source is not None
    folder = model.source.path
    out.mkdir(parents=True, exist_ok=True)
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="segbench-intake-") as tmp:
        for case in cases:
            staging = Path(tmp) / case
            staging.mkdir()
            try:
                stage_predictions(dataset, model, [case], staging, out)
            except (ValueError, OSError, ModelRunError) as exc:  # the staged copy's path in the message is the user's file's
                errors[case] = str(exc).replace(str(staging / "copy"), str(folder))
            if (staging / REFUSED_FILE).is_file():
                errors[case] = json.loads((staging / REFUSED_FILE).read_text(encoding="utf-8"))[case]
    if errors:
        raise _faulty(
            model.name,
            folder,
            errors,
            f"fix: map every label id the files hold to a structure of dataset {dataset.name!r} "
            f"({', '.join(sorted(dataset.labels))}) in {where}; a file on another grid is resampled by its affine, so its "
            "header must place it on the patient as the reference is placed (same orientation codes and origin)",
        )
    return out


def _evaluate_through_intake(
    gt: Path | str,
    predictions: Mapping[str, Path | str],
    dataset: str | None,
    pred_configs: Sequence[Path | str],
    label_map: Mapping[int, str] | None,
    options: dict[str, Any],
) -> Evaluation:
    """``evaluate`` of folders given by predictions configs, or ``--pred`` folders with a ``label_map``: each brought onto the
    references by :func:`staged_folder` in a temporary folder, then scored as any folder; the results name the user's folder."""
    conf = Path(options["conf"])
    root = conf.resolve().parent
    models = [predictions_config(path, root) for path in pred_configs]
    named = sorted({m.source.dataset for m in models if m.source is not None} | ({dataset} if dataset else set()))
    if len(named) != 1:
        raise ValueError(f"predictions configs and --dataset name {len(named)} datasets ({', '.join(named) or 'none'}): give --dataset, one dataset per run")
    dataset = named[0]
    where = {m.name: str(path) for m, path in zip(models, pred_configs, strict=True)}
    if label_map is not None:
        from segbench.models.schema import parse_predictions

        for model_name, folder in predictions.items():
            raw = {
                "dataset": dataset,
                "path": str(Path(folder).resolve()),
                "output": "{case}.nii.gz",
                "output_format": "multilabel",
                "label_map": {int(k): v for k, v in label_map.items()},
            }
            models.append(parse_predictions(model_name, raw, root))
            where[model_name] = "--label-map ID=STRUCTURE ..."
    elif predictions:
        raise ValueError("--pred folders with --pred-config need --label-map ID=STRUCTURE (or a predictions config each)")
    if len({m.name for m in models}) != len(models):
        raise ValueError(f"two models named alike: {sorted(m.name for m in models)}")
    config = dataset_from_conf(conf, dataset, root)
    config = dataclasses.replace(config, reference_dir=Path(gt))
    references = case_files(Path(gt), "references")
    cases = sorted(c for c in references if config.cases is None or c in config.cases)
    with tempfile.TemporaryDirectory(prefix="segbench-intake-") as tmp:
        folders = {m.name: staged_folder(m, config, cases, Path(tmp) / m.name, where[m.name]) for m in models}
        result = evaluate(gt, folders, dataset=dataset, **options)
    for model in models:
        assert model.source is not None
        result.results["models"][model.name]["source"] = Path(model.source.path).resolve().as_posix()
    return result


def _scored_team(model: str, folder: Path, listed: Mapping[str, list[Path]], files: Mapping[str, Path], request: _ScoringRequest) -> pd.DataFrame:
    """One team's rows, every case of ``request.cases`` (a case without a scoreable file scored as missing, under the
    request's policy): its files staged as private copies (:func:`_staged`) in a temporary folder of its own, scored in one pool
    with one progress bar, and the folder removed; an error names the team's file, never the copy."""
    originals: dict[str, str] = {}  # staged copy -> the team's file, for error messages
    triples = []
    references, missing = request.references, request.missing
    with tempfile.TemporaryDirectory(prefix="segbench-evaluate-") as tmp:
        for c in request.cases:
            staged = None
            if c in files:
                try:
                    if len(listed[c]) > 1:
                        raise intake.IntakeError(f"{folder}: {_two_files(c, listed[c])}; refused unread")
                    staged = _staged(files[c], references[c], Path(tmp), request.allowed, request.dicom_labels)
                    originals[str(staged)] = str(files[c])
                except ValueError as exc:  # refused unread, or a file that cannot be staged (copied, converted, drawn)
                    _unscoreable(model, c, exc, missing)
            triples.append((c, references[c], staged))
        # with "error" the first file that cannot be scored stops the run, naming it
        failed: dict[int, Exception] | None = None if missing == "error" else {}
        try:
            scored = score_cases(
                triples,
                request.chosen,
                workers=request.workers,
                progress=request.progress,
                allowed_labels=request.allowed,
                dicom_labels=request.dicom_labels,
                profile=request.profile,
                extra_profiles=request.extra,
                failed=failed,
            )
        except (ValueError, OSError) as exc:
            raise _named(exc, originals) from None
    for i, error in (failed or {}).items():
        _unscoreable(model, triples[i][0], _named(error, originals), missing)
    return scored


def _unscoreable(model: str, case_id: str, error: Exception, missing: str) -> None:
    """A prediction file that cannot be scored (refused unread, corrupt, off the reference grid, unknown labels): under
    ``missing="error"`` the run stops with its error; under a coverage policy the case counts as one the model has no
    prediction for, with a warning naming the file and what is wrong, and no other model or case stops."""
    if missing == "error":
        if isinstance(error, intake.IntakeError):
            raise intake.IntakeError(f"model {model}: predictions: {error}") from None
        raise error
    log.warning("model %s: %s; case %s scored as one without a prediction (coverage policy %s)", model, error, case_id, missing)


def write(evaluation: Evaluation, out: Path, report: bool = False) -> list[Path]:
    """``segbench evaluate``'s outputs in ``out``: the per-case CSV, ``results/<name>.json`` and with ``report`` the site."""
    out = Path(out)
    buffer = io.StringIO()
    evaluation.per_case.to_csv(buffer, index=False, lineterminator="\n")
    write_text_atomic(out / PER_CASE_FILE, buffer.getvalue())
    written = [out / PER_CASE_FILE, evaluation.to_json(out / "results" / f"{evaluation.results['dataset']['name']}.json")]
    if report:
        written.append(evaluation.to_html(out / "site"))
    return written
