"""Results files for the site tests, made by running ``segbench.stats.analyze`` on real data rows.

- Touchstone: the published per-case Dice/NSD of 19 models on the TotalSegmentator scans (real), a few
  organs, imported as ``kind: published`` with a ``source``, clustered by institute.
- KiTS-like: the real KiTS23 clinical metadata (78 cases) with seeded per-case scores of a simulated,
  an inference (contaminated: trained on kits23) and a published model; tumour absent in some cases.
- segauge-benchmark GPU run: the real published per-case scores of TotalSegmentator, CT-FM and MOOSE on
  20 KiTS23 cases, with the analysis the file publishes beside segbench's (``source_analysis``).
The envelope has the keys ``segbench.stages.compare.run_compare`` writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from segbench.base.bands import age_band
from segbench.base.io import write_json_atomic
from segbench.published.readers import read_touchstone
from segbench.published.segauge import read_segauge_analysis, read_segauge_results
from segbench.stats import analyze, beside_source, sensitivity
from segbench.stats.settings import StatsSettings

SETTINGS = StatsSettings(n_resamples=200)
TOUCHSTONE_SOURCE = "Touchstone (Bassi et al. 2024)"


def _envelope(name: str, title: str, models: dict[str, Any], metrics: dict[str, bool], analysis: dict, **dataset: Any) -> dict:
    return {
        "segbench_version": "0.1.0",
        "dataset": {"name": name, "title": title, "version": "test", **dataset},
        "models": models,
        "metrics": {m: {"higher_is_better": h} for m, h in metrics.items()},
        "hd95_definition": "segauge_pooled_area_weighted",
        "metric_profile": "segauge",
        "analysis": analysis,
        # no variant run (the KiTS23-like set adds its own)
        "sensitivity": {"profiles": {"baseline": "segauge", "variants": {}}, "missing_policy": {"baseline": "worst_case", "variants": {}}},
    }


def _model(title: str, kind: str, trained_on: tuple[str, ...] = (), dataset: str = "", **extra: Any) -> dict[str, Any]:
    return {
        "title": title,
        "kind": kind,
        "simulated": kind == "simulated",
        "licence": "test licence",
        "trained_on": list(trained_on),
        "contaminated": dataset in trained_on,
        "versions": {"model_version": "1"},
        **extra,
    }


def touchstone_results(folder: Path, out: Path, organs: tuple[str, ...]) -> Path:
    """Touchstone import of the given organs, every model and case."""
    rows = read_touchstone(folder)
    rows = rows[rows["structure"].isin(organs)]
    metrics = {"dice": True, "nsd": True}
    fields = ["gender", "age_band"]
    analysis = analyze(rows, metrics=metrics, settings=SETTINGS, subgroup_fields=fields, cluster_field="institute")
    models = {m: _model(m.replace("_", " "), "published", source=TOUCHSTONE_SOURCE) for m in sorted(rows["model"].unique())}
    results = _envelope(
        "touchstone_totalsegmentator",
        "Touchstone on TotalSegmentator (published per-case scores)",
        models,
        metrics,
        analysis,
        licence="CC BY 4.0",
        citation="Bassi et al., Touchstone Benchmark, NeurIPS 2024",
    )
    results["dataset"]["source_case_alignment"] = "pairwise_complete"  # as conf/published/touchstone_totalsegmentator.yaml states
    write_json_atomic(out, results)
    return out


def kits_like_results(metadata: Path, out: Path) -> Path:
    """Seeded KiTS-like scores on the real KiTS23 case list and metadata."""
    meta = pd.DataFrame(json.loads(metadata.read_text(encoding="utf-8")))
    rng = np.random.default_rng(0)
    cases = meta["case_id"].tolist()
    tumor_present = rng.random(len(cases)) > 0.1
    specs = {  # model: (kind, Dice shift, Dice spread, trained on)
        "sim_dilate_1mm": ("simulated", 0.00, 0.03, ()),
        "sim_erode_1mm": ("simulated", -0.005, 0.03, ()),
        "sim_shift_3mm": ("simulated", -0.08, 0.05, ()),
        "nnunet_kits": ("inference", 0.02, 0.02, ("kits23",)),
        "published_model": ("published", -0.03, 0.04, ()),
    }
    base = {"kidney_and_mass": 0.93, "tumor": 0.80}
    records = []
    for model, (_, shift, spread, _) in specs.items():
        for structure, level in base.items():
            noise = rng.normal(0, spread, len(cases))
            for i, case in enumerate(cases):
                present = structure == "kidney_and_mass" or bool(tumor_present[i])
                dice = float(np.clip(level + shift + noise[i], 0, 1)) if present else np.nan
                records.append(
                    {
                        "model": model,
                        "case_id": case,
                        "structure": structure,
                        "reference_present": present,
                        "dice": dice,
                        "nsd": dice if not present else float(np.clip(dice + 0.05, 0, 1)),
                        "hd95": np.nan if not present else float(30 * (1 - dice) + 1),
                        "assd": np.nan if not present else float(8 * (1 - dice) + 0.3),
                        "worst_case": bool(present and dice == 0),
                        "meta.gender": meta["gender"][i],
                        "meta.malignant": meta["malignant"][i],
                    }
                )
    rows = pd.DataFrame(records)
    rows["meta.age_band"] = age_band(meta.set_index("case_id").loc[rows["case_id"], "age_at_nephrectomy"]).to_numpy()
    metrics = {"dice": True, "hd95": False, "assd": False}
    models = {
        m: _model(m, kind, trained_on, "kits23", **({"source": "Example et al. 2025"} if kind == "published" else {}))
        for m, (kind, _, _, trained_on) in specs.items()
    }
    contaminated = {m: e["contaminated"] for m, e in models.items()}
    analysis = analyze(rows, metrics=metrics, settings=SETTINGS, subgroup_fields=["gender", "malignant", "age_band"], contaminated=contaminated)
    # another metric-definition profile: the same Dice, HD95 stretched per case (more for the erode model), so some orders flip
    stretch = np.where(rows["model"] == "sim_erode_1mm", 0.7, 1.0) * rng.uniform(0.9, 1.1, len(rows))
    profile_rows = rows.assign(metric_profile="deepmind", hd95=rows["hd95"] * stretch)
    results_sensitivity = sensitivity(analysis, rows, profile_rows, baseline_profile="segauge", metrics=metrics, settings=SETTINGS, contaminated=contaminated)
    results = _envelope(
        "kits23",
        "KiTS23-like test data",
        models,
        metrics,
        analysis,
        licence="CC BY-NC-SA 4.0",
        citation="Heller et al., The KiTS23 Challenge, 2023",
        regions={"kidney_and_mass": {"labels": [1, 2, 3], "nsd_tolerance_mm": 1.0331}},
    )
    results["sensitivity"] = results_sensitivity
    results["lesions"] = _kits_lesions(metadata.parent / "labels", out.parent / "lesion_maps", contaminated)
    write_json_atomic(out, results)
    return out


LESION_CASES = ("case_00008", "case_00021", "case_00028", "case_00037", "case_00050")


def _kits_lesions(labels_dir: Path, folder: Path, contaminated: dict[str, bool]) -> dict:
    """The lesion-wise block of real KiTS23 label maps (cropped to the kidneys) against SIMULATED predictions of three
    of the KiTS-like models: every lesion dilated or eroded by a voxel, or the map shifted 3 voxels."""
    from scipy import ndimage

    from lesion_cases import load_case
    from segbench.scoring.lesionwise import score_lesion_cases
    from segbench.scoring.settings import LesionSetting, lesion_structures
    from segbench.stats import lesion_analysis

    folder.mkdir(parents=True, exist_ok=True)
    edits = {
        "sim_dilate_1mm": lambda m: ndimage.binary_dilation(m),
        "sim_erode_1mm": lambda m: ndimage.binary_erosion(m),
        "sim_shift_3mm": lambda m: np.roll(m, 3, axis=1),
    }
    triples: dict[str, list] = {model: [] for model in edits}
    for case in LESION_CASES:
        labels, spacing = load_case(labels_dir, case)
        affine = np.diag([*spacing, 1.0])
        nib_save(labels, affine, folder / f"{case}.nii.gz")
        for model, edit in edits.items():
            pred = np.where(labels > 0, 1, 0).astype(np.uint8)
            for label in (2, 3):
                pred[edit(labels == label)] = label
            triples[model].append((case, folder / f"{case}.nii.gz", nib_save(pred, affine, folder / f"{case}_{model}.nii.gz")))
    setting = LesionSetting(lesion_structures({"tumor": 2, "cyst": 3}, ["tumor", "cyst"]), "brats", ("panoptica", "brats2023"), (1.0, 10.0))
    scored = {model: score_lesion_cases(t, setting, progress=False) for model, t in triples.items()}
    rows = pd.concat([r.assign(model=m) for m, (r, _) in scored.items()], ignore_index=True)
    instances = pd.concat([i.assign(model=m) for m, (_, i) in scored.items()], ignore_index=True)
    return lesion_analysis(rows, instances, profile="brats", settings=SETTINGS, contaminated={m: contaminated[m] for m in edits})


def nib_save(labels: np.ndarray, affine: np.ndarray, path: Path) -> Path:
    import nibabel as nib

    nib.save(nib.Nifti1Image(labels.astype(np.uint8), affine), path)
    return path


def segauge_results(path: Path, metadata: Path, out: Path) -> Path:
    """A segauge-benchmark results file as compare writes it: the source's model metadata and its analysis
    beside segbench's. B = 2000 as the source used."""
    rows = read_segauge_results(path, metadata)
    metrics = {"dice": True, "hd95": False, "nsd": True, "assd": False}
    analysis = analyze(rows, metrics=metrics, settings=StatsSettings(n_resamples=2000))
    claims = rows.attrs["models"]
    models = {
        m: _model(m, "published", tuple(c["contaminated_on"]), "kits23", source="segauge-benchmark " + path.name, licence=c["licence"])
        for m, c in claims.items()
    }
    results = _envelope(
        "segauge_kits23_modal",
        "segauge-benchmark GPU run on 20 KiTS23 cases",
        models,
        metrics,
        analysis,
        licence="Apache-2.0",
        citation="segauge-benchmark, github.com/RubenHaisma/segauge-benchmark",
        nsd_tolerance_mm={"kidney": 2.0},
    )
    results["hd95_definition"] = str(rows["hd95_definition"].iloc[0])
    results["source_analysis"] = beside_source(analysis, read_segauge_analysis(path))
    write_json_atomic(out, results)
    return out


def calibration_audit(out: Path, touchstone: Path | None = None) -> Path:
    """A calibration audit (``segbench.stats.calibration.audit``) of two equal models and a worse one over 300 cases drawn
    around real KiTS-like spreads, small enough for a test: 60 samples at n = 20 and 40; with ``touchstone``, the real
    populations of its liver and aorta (ranks 1, 2 and 4) beside them."""
    import numpy as np
    import pandas as pd

    from segbench.stats import StatsSettings, calibration

    rng = np.random.default_rng(0)
    base = rng.beta(30, 3, size=300)
    models = {"equal_a": 0.0, "equal_b": 0.0, "inward_1.5mm": 0.02}
    rows = pd.DataFrame(
        [
            {"model": m, "case_id": f"case_{i:05d}", "structure": s, "reference_present": True, "dice": d, "hd95": 2.0 / max(d, 0.05)}
            for s in ("kidney_and_mass", "tumor")
            for m, drop in models.items()
            for i, d in enumerate(np.clip(base - drop + rng.normal(0, 0.01, 300), 0, 1))
        ]
    )
    audit = calibration.audit(
        rows,
        models=tuple(models),
        equal=("equal_a", "equal_b"),
        structures=("kidney_and_mass", "tumor"),
        metrics={"dice": True, "hd95": False},
        n_cases=(20, 40),
        draws=60,
        wilcoxon_draws=20,
        n_resamples=200,
        seed=0,
        settings=StatsSettings(),
        real=_real(touchstone),
    )
    write_json_atomic(out, audit)
    return out


def _real(touchstone: Path | None) -> list:
    from segbench.stats import calibration

    if touchstone is None:
        return []
    rows = read_touchstone(touchstone)
    rows = rows[rows["structure"].isin(("liver", "aorta"))]
    return [(calibration.ranked_populations(rows, "touchstone_totalsegmentator", {"dice": True, "nsd": True}, (1, 2, 4)), 60, 20)]


#: the dataset each test audit population's cases come from, as compare takes it from params.yaml
AUDIT_DATA = {"simulated": "kits23", "touchstone_totalsegmentator": "totalsegmentator"}
#: the audit source and data of each test results file, as compare sets them (stages.board_population)
BOARD_SOURCES = {
    "kits23": ("simulated", "kits23"),
    "touchstone_totalsegmentator": ("touchstone_totalsegmentator", "totalsegmentator"),
    "segauge_kits23_modal": ("segauge_kits23_modal", "kits23"),
}


def add_audited(results_file: Path, audit_file: Path) -> Path:
    """The results' ``audited`` block from the test audit, built as compare builds it (``stats.audited_board`` over the
    audit's tables, read as ``calibration.tables`` writes them)."""
    from segbench.stats import AuditTables, audited_board, audited_lesions, calibration, level_provider, recompute

    audit = json.loads(audit_file.read_text(encoding="utf-8"))
    frames = calibration.tables(audit)
    tables = AuditTables(
        pd.concat([frames["coverage"], frames["real_coverage"]], ignore_index=True),
        pd.concat([frames["type1"], frames["real_type1"]], ignore_index=True),
        audit["stats"],
        AUDIT_DATA,
        pd.concat([frames["levels"], frames["real_levels"]], ignore_index=True),
    )
    results = json.loads(results_file.read_text(encoding="utf-8"))
    source, data = BOARD_SOURCES[results["dataset"]["name"]]
    # compare computes the CIs at the audit's calibrated levels: the analysis re-derived at them
    results["analysis"] = recompute(results["analysis"], ci_levels=level_provider(tables, source=source, data=data, settings=results["analysis"]["settings"]))
    results["audited"] = audited_board(tables, results["analysis"], source=source, data=data, lesions=audited_lesions if "lesions" in results else None)
    write_json_atomic(results_file, results)
    return results_file
