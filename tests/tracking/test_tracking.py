"""MLflow tracking with a real embedded store: idempotent logging, read-back, failure states."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from segbench.tracking import runs as tracking
from tests_support import score_bundle


def test_logging_is_idempotent_and_rows_come_back(tracking_store: str) -> None:
    bundle = score_bundle()
    first = tracking.log_bundle(bundle)
    assert tracking.log_bundle(bundle) == first
    client = MlflowClient(tracking_store)
    runs = client.search_runs([client.get_experiment_by_name("segbench/toy").experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags["segbench.kind"] == "simulated"
    assert run.data.metrics["kidney.dice.mean"] == bundle.record["metrics"]["kidney.dice.mean"] == pytest.approx(0.85)
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["per_case.csv", "per_case.json", "run.json"]
    runs = tracking.read_runs("toy", {"sim_a": bundle.fingerprint})
    assert runs.rows["dice"].tolist() == [0.9, 0.8]
    assert runs.tags["sim_a"]["segbench.model"] == "sim_a"
    assert runs.run_ids == {"sim_a": first}


def test_rows_under_other_profiles_travel_with_the_run_and_come_back(tracking_store: str) -> None:
    """A bundle with per_case_profiles.csv: another fingerprint than without it, logged as an artifact, read back
    as profile_rows beside the runs that have none."""
    plain = score_bundle()
    other = plain.per_case_csv.decode().replace("0.9", "0.7").replace("reference_present", "reference_present,metric_profile")
    other = other.replace("True,", "True,deepmind,").encode()
    bundle = dataclasses.replace(plain, tables={tracking.PROFILES_ARTIFACT: other})
    assert bundle.fingerprint != plain.fingerprint
    tracking.log_bundle(bundle)
    tracking.log_bundle(score_bundle(model="sim_b"))
    runs = tracking.read_runs("toy", {"sim_a": bundle.fingerprint, "sim_b": score_bundle(model="sim_b").fingerprint})
    assert runs.profile_rows[["model", "metric_profile", "dice"]].values.tolist() == [["sim_a", "deepmind", 0.7], ["sim_a", "deepmind", 0.8]]
    assert runs.rows["dice"].tolist() == [0.9, 0.8, 0.9, 0.8]
    assert tracking.read_runs("toy", {"sim_b": score_bundle(model="sim_b").fingerprint}).profile_rows.empty


def test_lesion_tables_are_artifacts_of_the_run_and_come_back(tracking_store: str) -> None:
    """The lesion-wise scores and the per-lesion table: part of the fingerprint, MLflow artifacts of the model's run,
    read back beside the per-case rows; an unknown table name is refused."""
    plain = score_bundle()
    lesions = b"model,case_id,structure,lesion_profile,reference_present,rq\nsim_a,c1,tumor,brats,True,0.5\n"
    instances = b"model,case_id,structure,lesion_profile,status,dice\nsim_a,c1,tumor,brats,TP,0.8\nsim_a,c1,tumor,brats,FP,0.0\n"
    bundle = dataclasses.replace(plain, tables={tracking.LESIONS_ARTIFACT: lesions, tracking.INSTANCES_ARTIFACT: instances})
    assert bundle.fingerprint not in {plain.fingerprint, dataclasses.replace(plain, tables={tracking.LESIONS_ARTIFACT: lesions}).fingerprint}
    run_id = tracking.log_bundle(bundle)
    logged = [a.path for a in MlflowClient(tracking_store).list_artifacts(run_id)]
    assert {"instances.csv", "per_case_lesions.csv"} <= set(logged)
    runs = tracking.read_runs("toy", {"sim_a": bundle.fingerprint})
    assert runs.lesion_rows[["structure", "lesion_profile", "rq"]].values.tolist() == [["tumor", "brats", 0.5]]
    assert runs.instance_rows["status"].tolist() == ["TP", "FP"]
    with pytest.raises(tracking.TrackingError, match="unknown table"):
        tracking.ScoreBundle(plain.per_case_csv, plain.record, {"lesions.csv": lesions})


def test_interrupted_run_is_marked_failed_and_relogged(tracking_store: str) -> None:
    bundle = score_bundle()
    client = MlflowClient(tracking_store)
    experiment = client.create_experiment("segbench/toy")
    stale = client.create_run(experiment, tags={tracking.FINGERPRINT_TAG: bundle.fingerprint}).info.run_id  # left RUNNING
    run_id = tracking.log_bundle(bundle)
    assert run_id != stale
    assert client.get_run(stale).info.status == "FAILED"
    assert client.get_run(run_id).info.status == "FINISHED"


def test_missing_and_duplicate_runs_are_errors(tracking_store: str) -> None:
    bundle = score_bundle()
    tracking.log_bundle(score_bundle("other"))
    with pytest.raises(tracking.TrackingError, match="no FINISHED MLflow run .* model 'sim_a'"):
        tracking.read_runs("toy", {"sim_a": bundle.fingerprint})
    client = MlflowClient(tracking_store)
    experiment = client.get_experiment_by_name("segbench/toy").experiment_id
    for _ in range(2):
        run = client.create_run(experiment, tags={tracking.FINGERPRINT_TAG: bundle.fingerprint})
        client.set_terminated(run.info.run_id, "FINISHED")
    with pytest.raises(tracking.TrackingError, match="2 MLflow runs claim"):
        tracking.read_runs("toy", {"sim_a": bundle.fingerprint})


def test_runs_come_back_with_their_record_and_the_store_is_searched_by_fingerprint(tracking_store: str) -> None:
    """read_runs gives each model's run record as its bundle holds it (a record that is no JSON object is refused,
    naming the artifact); missing_runs names the models no FINISHED run holds the fingerprint of (every one before the
    experiment exists, a run left RUNNING is none), and keeps the first of duplicate runs as logging does."""
    a, b = score_bundle("sim_a"), score_bundle("sim_b", dice=(0.7, 0.8))
    fingerprints = {"sim_b": b.fingerprint, "sim_a": a.fingerprint}
    assert tracking.missing_runs("toy", fingerprints) == ["sim_a", "sim_b"]
    tracking.log_bundle(a)
    client = MlflowClient(tracking_store)
    experiment = client.get_experiment_by_name("segbench/toy").experiment_id
    client.create_run(experiment, tags={tracking.FINGERPRINT_TAG: b.fingerprint})  # left RUNNING: no run of b
    assert tracking.missing_runs("toy", fingerprints) == ["sim_b"]
    tracking.log_bundle(b)
    duplicate = client.create_run(experiment, tags={tracking.FINGERPRINT_TAG: a.fingerprint}).info.run_id
    client.set_terminated(duplicate, "FINISHED")
    assert tracking.missing_runs("toy", fingerprints) == []
    assert client.get_run(duplicate).info.lifecycle_stage == "deleted"
    runs = tracking.read_runs("toy", fingerprints)
    assert runs.records == {"sim_a": a.record, "sim_b": b.record}
    artifact = Path(urlparse(client.get_run(runs.run_ids["sim_b"]).info.artifact_uri).path) / tracking.RECORD_ARTIFACT
    artifact.write_text("[1]", encoding="utf-8")
    with pytest.raises(tracking.TrackingError, match=f"{runs.run_ids['sim_b']}: .*/run.json: not a run record \\(a JSON list"):
        tracking.read_runs("toy", fingerprints)


def test_store_location_ignores_queued_experiment_workspaces(tmp_path, monkeypatch) -> None:
    (tmp_path / ".dvc" / "tmp" / "exps" / "run" / "abc").mkdir(parents=True)
    assert tracking.project_root(tmp_path / ".dvc" / "tmp" / "exps" / "run" / "abc") == tmp_path
    monkeypatch.delenv("SEGBENCH_TRACKING_URI", raising=False)
    assert tracking.tracking_uri(tmp_path) == f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"


def test_experiments_are_of_mlflow_model_training_kind(tracking_store: str) -> None:
    """New experiments are created with MLflow's experiment-kind tag; one made before it gets the tag."""
    client = MlflowClient(tracking_store)
    older = client.create_experiment("segbench/toy")
    tracking.log_bundle(score_bundle())
    tracking.log_bundle(score_bundle(dataset="other"))
    for experiment in (client.get_experiment(older), client.get_experiment_by_name("segbench/other")):
        assert experiment.tags["mlflow.experimentKind"] == "custom_model_development", experiment.name


def test_bundle_without_dataset_identity_is_an_error_naming_the_file(tmp_path) -> None:
    bundle = score_bundle()
    del bundle.record["params"]["dataset.source"]
    (tmp_path / "per_case.csv").write_bytes(bundle.per_case_csv)
    (tmp_path / "run.json").write_text(json.dumps(bundle.record))
    with pytest.raises(tracking.TrackingError, match=f"{tmp_path / 'run.json'}: missing params.dataset.source"):
        tracking.ScoreBundle.read(tmp_path)


def test_leaderboard_run_is_logged_once_per_content_and_never_read_as_a_model_run(tracking_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_store)  # load_table searches the default store
    bundles = [score_bundle("sim_a"), score_bundle("sim_b", dice=(0.7, 0.8))]
    runs = {b.record["tags"]["segbench.model"]: tracking.log_bundle(b) for b in bundles}
    drawn = []

    def pages() -> dict[str, bytes]:
        drawn.append(1)
        return {"toy.html": b"<p>toy</p>"}

    table = pd.DataFrame({"structure": ["kidney"] * 2, "metric": ["dice"] * 2, "model": ["sim_a", "sim_b"], "ci_low": [0.8, 0.6]})
    board = tracking.Leaderboard(
        "toy",
        "toy.json",
        b"{}",
        runs,
        {"kidney.dice.mean": 0.85, "kidney.dice.verdict": 1.0},
        {"kidney.dice.verdict": "✔ separable"},
        {"stats.seed": "0"},
        table,
        ["metrics.`kidney.dice.mean`", "tags.`kidney.dice.verdict`"],
        pages,
    )
    first = tracking.log_leaderboard(board)
    assert tracking.log_leaderboard(board) == first and len(drawn) == 1  # the pages are drawn for a new run only
    assert tracking.log_leaderboard(dataclasses.replace(board, results=b"{ }")) != first
    client = MlflowClient(tracking_store)
    run = client.get_run(first)
    assert run.data.tags["segbench.kind"] == "leaderboard" and run.data.tags["segbench.run.sim_b"] == runs["sim_b"]
    assert run.data.tags["kidney.dice.verdict"] == "✔ separable"  # the verdict in words, a text column of the runs table
    assert run.data.metrics == board.metrics and run.data.params == board.params
    assert {a.path for a in client.list_artifacts(first)} == {"toy.json", "toy.html", "leaderboard.json"}
    pd.testing.assert_frame_equal(client.load_table(run.info.experiment_id, "leaderboard.json", run_ids=[first]), table)
    experiment = client.get_experiment(run.info.experiment_id)
    view = json.loads(experiment.tags[tracking.VIEW_TAG])  # the runs table's columns, opened by ?viewStateShareKey=segbench
    assert view["selectedColumns"] == ["attributes.`Source`", "attributes.`Dataset`", "metrics.`kidney.dice.mean`", "tags.`kidney.dice.verdict`"]
    assert view["columnOrder"] == view["selectedColumns"][2:]
    assert "viewStateShareKey=segbench" in experiment.tags["mlflow.note.content"]
    assert [i.dataset.digest for i in run.inputs.dataset_inputs] == ["0123abcd"]
    # a leaderboard run that claimed a model's fingerprint is still not read as that model's run
    client.set_tag(first, tracking.FINGERPRINT_TAG, bundles[0].fingerprint)
    assert tracking.read_runs("toy", {"sim_a": bundles[0].fingerprint}).run_ids == {"sim_a": runs["sim_a"]}


def test_names_in_the_leaderboard_note_are_plain_markdown_text() -> None:
    """Model names went into the MLflow note as raw Markdown: a rendered off-site link, a bare <img>."""
    import markdown_it

    render = markdown_it.MarkdownIt("commonmark").render
    for name in ['<img src="https://example.org/x.png">', "[click](https://example.org)", "*bold* `code` _em_ #1 \\ | ~x~ a&b"]:
        line = f"- [{tracking.markdown_text(name)}](#/experiments/1/runs/2)"
        rendered = render(line)
        assert "<img" not in rendered and "<em>" not in rendered and "<strong>" not in rendered and "<code>" not in rendered, rendered
        assert rendered.count("<a href=") == 1 and 'href="https://example.org' not in rendered, rendered
    assert tracking.markdown_text("sim_dilate_1mm") == "sim_dilate_1mm"  # a name that needs nothing keeps its bytes
