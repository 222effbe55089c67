"""Published per-case scores go through import -> MLflow -> compare like scored runs (real files, real MLflow)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from projects import working_folder
from segbench.cli import main
from segbench.config.validation import compose_params
from segbench.published.segauge import read_segauge_analysis
from segbench.stages.bundles import published_facts
from segbench.tracking import runs as tracking
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


def _segauge_set(root: Path, folder: Path) -> dict[str, Any]:
    """segauge_kits23_seed's configuration on a copy of its file (in ``folder``) whose first model claims its own licence
    and training on KiTS23."""
    spec = compose_params(root / "conf", ["published=[segauge_kits23_seed]"])["published"]["segauge_kits23_seed"]
    doc = json.loads((root / spec["path"]).read_text(encoding="utf-8"))
    doc["models"][0] |= {"license": "CC-BY-NC-4.0", "contaminated_on": ["kits23"]}
    folder.mkdir(parents=True)
    (folder / "kits23_claims.json").write_text(json.dumps(doc), encoding="utf-8")
    return {**spec, "path": str(folder / "kits23_claims.json")}


def test_compare_takes_what_it_needs_of_a_published_set_from_the_runs_not_its_files(root: Path, tmp_path: Path, tracking_store: str) -> None:
    """The import stage writes the set's import summary, the analysis its file publishes and each model's claims
    (licence, training sets) into every bundle's run record; compare reads them back from the model runs with the rows:
    the set's file removed after import and track, compare still gives each model its claims and the board the summary
    and the source's analysis (it used to parse the file again)."""
    name = "segauge_claims"
    spec = _segauge_set(root, tmp_path / "files")
    project = working_folder(root, tmp_path / "project", ["stats.n_resamples=200"], published={name: spec})
    with in_directory(project):
        assert main(["import", "--published", name]) == 0
        assert main(["track", "--dataset", name]) == 0
    fast, full = (json.loads((project / "scores" / name / m / "run.json").read_text())["published"] for m in ("TotalSegmentator-fast", "TotalSegmentator"))
    assert fast["claims"] == {"licence": "CC-BY-NC-4.0", "contaminated_on": ["kits23"]}
    assert full["claims"] == {"licence": "Apache-2.0", "contaminated_on": ["totalsegmentator"]}
    assert fast["import_summary"] == full["import_summary"] and fast["import_summary"]["models"] == 2  # the set's, in each bundle
    assert fast["source_analysis"] == full["source_analysis"] == read_segauge_analysis(Path(spec["path"]))
    Path(spec["path"]).unlink()
    with in_directory(project):
        assert main(["compare", "--dataset", name]) == 0
    results = json.loads((project / "results" / f"{name}.json").read_text())
    assert results["dataset"]["import_summary"] == fast["import_summary"]
    assert results["source_analysis"]["protocol"] == fast["source_analysis"]["protocol"]
    assert {s: set(cells) for s, cells in results["source_analysis"]["structures"].items()} == {"kidney": {"dice", "hd95", "nsd", "assd"}}
    models = results["models"]
    assert (models["TotalSegmentator-fast"]["licence"], models["TotalSegmentator-fast"]["trained_on"]) == ("CC-BY-NC-4.0", ["kits23"])
    assert models["TotalSegmentator-fast"]["contaminated"] and not models["TotalSegmentator"]["contaminated"]
    assert (models["TotalSegmentator"]["licence"], models["TotalSegmentator"]["trained_on"]) == ("Apache-2.0", ["totalsegmentator"])


def test_compare_reads_a_bundle_only_to_restore_a_run_the_store_lacks(published_folder: Path, tracking_store: str, capsys: pytest.CaptureFixture) -> None:
    """The rows come from the store only: a bundle made unreadable after tracking leaves the board as it was, since
    its run is in the store. A run the store lacks is logged again from its bundle, which is read and checked then:
    the unreadable one is refused naming its file, and a marker naming another fingerprint than its bundle's is named."""
    name = "segauge_kits23_seed"
    _pipeline(published_folder, name)
    results = published_folder / "results" / f"{name}.json"
    board = results.read_bytes()
    fast = published_folder / "scores" / name / "TotalSegmentator-fast"
    kept = {path: path.read_bytes() for path in fast.iterdir()}
    for path in kept:
        path.write_bytes(b"not a score bundle\n")
    results.unlink()
    with in_directory(published_folder):
        assert main(["compare", "--dataset", name]) == 0
    assert results.read_bytes() == board
    client = MlflowClient(tracking_store)
    experiment = client.get_experiment_by_name(tracking.experiment_name(name)).experiment_id

    def fingerprint(model: str) -> str:
        return json.loads((published_folder / "tracking" / name / f"{model}.json").read_text())["fingerprint"]

    def runs(model: str) -> list[str]:
        """The ids of the store's (active) runs of ``model``'s bundle."""
        return [r.info.run_id for r in client.search_runs([experiment], filter_string=f"tags.`{tracking.FINGERPRINT_TAG}` = '{fingerprint(model)}'")]

    (deleted,) = runs("TotalSegmentator")
    client.delete_run(deleted)
    with in_directory(published_folder):
        assert main(["compare", "--dataset", name]) == 0
    assert results.read_bytes() == board
    assert len(runs("TotalSegmentator")) == 1 and runs("TotalSegmentator") != [deleted]  # logged again from its bundle
    client.delete_run(runs("TotalSegmentator-fast")[0])
    capsys.readouterr()
    with in_directory(published_folder):
        assert main(["compare", "--dataset", name]) == 1
    assert f"scores/{name}/TotalSegmentator-fast/run.json: not a readable score bundle's run record" in capsys.readouterr().err
    for path, content in kept.items():
        path.write_bytes(content)
    marker = published_folder / "tracking" / name / "TotalSegmentator-fast.json"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "fingerprint": "0" * 64}), encoding="utf-8")
    with in_directory(published_folder):
        assert main(["compare", "--dataset", name]) == 1
    error = capsys.readouterr().err
    assert f"names fingerprint 000000000000, not that of scores/{name}/TotalSegmentator-fast (" in error
    assert "the track stage logs that bundle and writes the marker again" in error


def test_runs_of_two_imports_of_a_set_are_refused_naming_the_models(published_folder: Path, capsys: pytest.CaptureFixture) -> None:
    """Every model's bundle carries the set's import summary; compare takes it from the runs it reads and refuses copies
    that differ (runs of two imports of the set), naming the models, the summary's fields and the stages to rerun; a
    record without the summary (a bundle imported before records carried it) is refused too."""
    name = "segauge_kits23_seed"
    record = published_folder / "scores" / name / "TotalSegmentator" / "run.json"
    with in_directory(published_folder):
        assert main(["import", "--published", name]) == 0
        assert main(["track", "--dataset", name]) == 0
        changed = json.loads(record.read_text())
        changed["published"]["import_summary"]["cells"] += 1  # as another import of the set would have found
        record.write_text(json.dumps(changed), encoding="utf-8")
        assert main(["track", "--dataset", name]) == 0  # logs the changed bundle, writes its marker again
        capsys.readouterr()
        assert main(["compare", "--dataset", name]) == 1
    error = capsys.readouterr().err
    assert "the import summaries of the models' runs differ ('TotalSegmentator' against 'TotalSegmentator-fast', in cells)" in error
    assert f"`dvc repro -f -s import@{name}`" in error
    with pytest.raises(ValueError, match=r"published set 's': the run record of 'b' holds no import summary; rerun the set's import"):
        published_facts("s", {"a": {"published": {"import_summary": {}}}, "b": {"tags": {}}})
    with pytest.raises(ValueError, match=r"the published analyses of the models' runs differ \('a' against 'b', in protocol\)"):
        published_facts("s", {m: {"published": {"import_summary": {}, "source_analysis": {"protocol": m}}} for m in "ab"})
