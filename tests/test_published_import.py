"""Published per-case scores go through import -> MLflow -> compare like scored runs (real files, real MLflow)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from projects import working_folder
from segbench import tracking
from segbench.cli import main
from tests_support import in_directory

TOUCHSTONE_ORGANS = ["aorta", "gall_bladder", "kidney_left", "kidney_right", "liver", "pancreas", "postcava", "spleen", "stomach"]


@pytest.fixture
def project(root: Path, tmp_path: Path, tracking_store: str) -> Path:
    """A working folder whose params.yaml selects both published sets (B = 200) and points at the real data."""
    return working_folder(root, tmp_path, ["published=[touchstone_totalsegmentator,segauge_kits23_seed]", "stats.n_resamples=200"])


def _pipeline(project: Path, name: str) -> dict:
    with in_directory(project):
        for argv in (["import", "--published", name], ["track", "--dataset", name], ["compare", "--dataset", name]):
            assert main(argv) == 0, argv
    return json.loads((project / "results" / f"{name}.json").read_text())


def test_touchstone_means_and_sds_equal_the_csvs(project: Path, root: Path) -> None:
    results = _pipeline(project, "touchstone_totalsegmentator")
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


def test_segauge_results_file_keeps_contamination_claims(project: Path) -> None:
    results = _pipeline(project, "segauge_kits23_seed")
    models = results["models"]
    assert set(models) == {"TotalSegmentator", "TotalSegmentator-fast"}
    # both list the TotalSegmentator dataset as training data; they are evaluated on KiTS23, so not contaminated
    assert all(m["trained_on"] == ["totalsegmentator"] and not m["contaminated"] for m in models.values())
    kidney = results["analysis"]["structures"]["kidney"]["metrics"]["dice"]["models"]["TotalSegmentator-fast"]
    assert kidney["mean"] == pytest.approx(np.mean([0.9142942896804057, 0.9111212598343535, 0.8924224058021208]))


def test_reanalyze_passes_on_results_and_names_a_tampered_number(project: Path, capsys: pytest.CaptureFixture) -> None:
    _pipeline(project, "segauge_kits23_seed")
    path = project / "results" / "segauge_kits23_seed.json"
    assert main(["reanalyze", str(path)]) == 0
    results = json.loads(path.read_text())
    results["analysis"]["structures"]["kidney"]["metrics"]["dice"]["models"]["TotalSegmentator"]["mean"] += 0.01
    tampered = project / "tampered.json"
    tampered.write_text(json.dumps(results))
    assert main(["reanalyze", str(tampered)]) == 1
    assert "differ from a recomputation" in capsys.readouterr().err


def test_compare_reads_a_bundle_only_to_restore_a_run_the_store_lacks(project: Path, tracking_store: str, capsys: pytest.CaptureFixture) -> None:
    """The rows come from the store only: a bundle made unreadable after tracking leaves the board as it was, since
    its run is in the store. A run the store lacks is logged again from its bundle, which is read and checked then:
    the unreadable one is refused naming its file, and a marker naming another fingerprint than its bundle's is named."""
    name = "segauge_kits23_seed"
    _pipeline(project, name)
    results = project / "results" / f"{name}.json"
    board = results.read_bytes()
    fast = project / "scores" / name / "TotalSegmentator-fast"
    kept = {path: path.read_bytes() for path in fast.iterdir()}
    for path in kept:
        path.write_bytes(b"not a score bundle\n")
    results.unlink()
    with in_directory(project):
        assert main(["compare", "--dataset", name]) == 0
    assert results.read_bytes() == board
    client = MlflowClient(tracking_store)
    experiment = client.get_experiment_by_name(tracking.experiment_name(name)).experiment_id

    def fingerprint(model: str) -> str:
        return json.loads((project / "tracking" / name / f"{model}.json").read_text())["fingerprint"]

    def runs(model: str) -> list[str]:
        """The ids of the store's (active) runs of ``model``'s bundle."""
        return [r.info.run_id for r in client.search_runs([experiment], filter_string=f"tags.`{tracking.FINGERPRINT_TAG}` = '{fingerprint(model)}'")]

    (deleted,) = runs("TotalSegmentator")
    client.delete_run(deleted)
    with in_directory(project):
        assert main(["compare", "--dataset", name]) == 0
    assert results.read_bytes() == board
    assert len(runs("TotalSegmentator")) == 1 and runs("TotalSegmentator") != [deleted]  # logged again from its bundle
    client.delete_run(runs("TotalSegmentator-fast")[0])
    capsys.readouterr()
    with in_directory(project):
        assert main(["compare", "--dataset", name]) == 1
    assert f"scores/{name}/TotalSegmentator-fast/run.json: not a readable score bundle's run record" in capsys.readouterr().err
    for path, content in kept.items():
        path.write_bytes(content)
    marker = project / "tracking" / name / "TotalSegmentator-fast.json"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "fingerprint": "0" * 64}), encoding="utf-8")
    with in_directory(project):
        assert main(["compare", "--dataset", name]) == 1
    error = capsys.readouterr().err
    assert f"names fingerprint 000000000000, not that of scores/{name}/TotalSegmentator-fast (" in error
    assert "the track stage logs that bundle and writes the marker again" in error
