"""Published per-case scores go through import -> MLflow -> compare like scored runs (real files, real MLflow)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from projects import working_folder
from segbench.cli import main
from tests_support import in_directory

TOUCHSTONE_ORGANS = ["aorta", "gall_bladder", "kidney_left", "kidney_right", "liver", "pancreas", "postcava", "spleen", "stomach"]


@pytest.fixture
def published_folder(root: Path, tmp_path: Path, tracking_store: str) -> Path:
    """A working folder whose params.yaml selects both published sets (B = 200) and points at the real data."""
    return working_folder(root, tmp_path, ["published=[touchstone_totalsegmentator,segauge_kits23_seed]", "stats.n_resamples=200"])


def _pipeline(project: Path, name: str) -> dict:
    with in_directory(project):
        for argv in (["import", "--published", name], ["track", "--dataset", name], ["compare", "--dataset", name]):
            assert main(argv) == 0, argv
    return json.loads((project / "results" / f"{name}.json").read_text())


def test_touchstone_means_and_sds_equal_the_csvs(published_folder: Path, root: Path) -> None:
    results = _pipeline(published_folder, "touchstone_totalsegmentator")
    assert len(results["models"]) == 19
    assert all(m["kind"] == "published" and not m["contaminated"] for m in results["models"].values())
    folder = root / "data" / "published" / "touchstone_totalsegmentator"
    for model in results["models"]:
        for metric, filename in (("dice", "dsc.csv"), ("nsd", "nsd.csv")):
            table = pd.read_csv(folder / model / filename)
            for organ in TOUCHSTONE_ORGANS:
                estimate = results["analysis"]["structures"][organ]["metrics"][metric]["models"][model]
                # ranks use the shared cases; a model reporting more cases also gets its estimate over all of them
                estimate = estimate["all_reported"] or estimate
                assert estimate["n"] == table[organ].notna().sum()
                assert estimate["mean"] == pytest.approx(table[organ].mean(skipna=True), abs=5e-5), (model, organ, metric)
                assert estimate["sd"] == pytest.approx(table[organ].std(skipna=True), abs=5e-5), (model, organ, metric)


def test_segauge_results_file_keeps_contamination_claims(published_folder: Path) -> None:
    results = _pipeline(published_folder, "segauge_kits23_seed")
    models = results["models"]
    assert set(models) == {"TotalSegmentator", "TotalSegmentator-fast"}
    # both list the TotalSegmentator dataset as training data; they are evaluated on KiTS23, so not contaminated
    assert all(m["trained_on"] == ["totalsegmentator"] and not m["contaminated"] for m in models.values())
    kidney = results["analysis"]["structures"]["kidney"]["metrics"]["dice"]["models"]["TotalSegmentator-fast"]
    assert kidney["mean"] == pytest.approx(np.mean([0.9142942896804057, 0.9111212598343535, 0.8924224058021208]))


def test_reanalyze_passes_on_results_and_names_a_tampered_number(published_folder: Path, capsys: pytest.CaptureFixture) -> None:
    _pipeline(published_folder, "segauge_kits23_seed")
    path = published_folder / "results" / "segauge_kits23_seed.json"
    assert main(["reanalyze", str(path)]) == 0
    results = json.loads(path.read_text())
    results["analysis"]["structures"]["kidney"]["metrics"]["dice"]["models"]["TotalSegmentator"]["mean"] += 0.01
    tampered = published_folder / "tampered.json"
    tampered.write_text(json.dumps(results))
    assert main(["reanalyze", str(tampered)]) == 1
    assert "differ from a recomputation" in capsys.readouterr().err
