"""The whole pipeline with real dvc, real MLflow, real segauge and real KiTS23 label maps.

A small experiment (4 real cases, 2 simulated models, B = 500) is composed from conf/ exactly as
`dvc exp run -S` would, run with `dvc repro`, pushed to a local remote, cloned, pulled and reproduced.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
import segauge
import yaml

import segbench
from projects import SMALL, SMALL_PUBLISHED, Projects
from projects import SMALL_CASES as CASES
from projects import SMALL_MODELS as MODELS
from tests_support import commit_all
from tests_support import run_command as run

PUBLISHED = ["TotalSegmentator", "TotalSegmentator-fast"]  # the models of the small segauge-benchmark published set

pytestmark = pytest.mark.slow


def mlflow_runs(project: Path) -> list[tuple[str, str, str]]:
    """(experiment, run name, status) of every run in the project's embedded store."""
    with sqlite3.connect(project / "mlruns" / "mlflow.db") as db:
        return db.execute("SELECT e.name, r.name, r.status FROM runs r JOIN experiments e USING (experiment_id) ORDER BY e.name, r.name").fetchall()


EXPECTED_RUNS = sorted([(f"segbench/{d}", m, "FINISHED") for d, models in (("kits23", MODELS), (SMALL_PUBLISHED, PUBLISHED)) for m in [*models, "leaderboard"]])


def base_commit(project: Path) -> str:
    """The commit the project's `dvc repro` ran on (a copy's tests commit on top of it)."""
    return run(["git", "rev-list", "--max-parents=0", "HEAD"], project).strip()


def test_repro_produces_results_site_and_one_mlflow_run_per_pair(small_run: Path) -> None:
    results = json.loads((small_run / "results" / "kits23.json").read_text())
    assert sorted(results["models"]) == MODELS
    assert all(m["simulated"] and m["kind"] == "simulated" for m in results["models"].values())
    structures = results["analysis"]["structures"]
    assert set(structures) == {"kidney_and_mass", "mass", "tumor"}
    kidney = structures["kidney_and_mass"]["metrics"]["dice"]
    assert kidney["models"]["sim_dilate_1mm"]["n"] == len(CASES)
    assert 0 < kidney["models"]["sim_dilate_1mm"]["ci_low"] <= kidney["models"]["sim_dilate_1mm"]["mean"] <= kidney["models"]["sim_dilate_1mm"]["ci_high"] < 1
    assert mlflow_runs(small_run) == EXPECTED_RUNS
    # the deepmind profile's rows went score -> MLflow -> compare; no model fails a case of these four
    sensitivity = results["sensitivity"]
    assert sensitivity["profiles"]["baseline"] == "segauge" and sensitivity["profiles"]["variants"]["deepmind"]["run"]
    assert sensitivity["missing_policy"]["n_failed_rows"] == 0 and not sensitivity["missing_policy"]["variants"]["drop_failed"]["run"]
    assert (small_run / "scores" / "kits23" / "sim_dilate_1mm" / "per_case_profiles.csv").is_file()
    assert "Implementation sensitivity" in (small_run / "site" / "kits23.html").read_text()
    published = json.loads((small_run / "results" / "segauge_kits23_seed.json").read_text())
    assert all(m["kind"] == "published" for m in published["models"].values())
    assert "SIMULATED" in (small_run / "site" / "index.html").read_text()
    assert "plotly.min.js" in (small_run / "site" / "kits23--kidney_and_mass.html").read_text()
    assert (small_run / "site" / "plotly.min.js").stat().st_size > 1_000_000


def test_lesion_wise_scores_go_score_mlflow_compare_site(small_run: Path) -> None:
    """scoring.lesions (conf/config.yaml): per-lesion tables from the score stage, MLflow artifacts of each model's run,
    read back by compare into the results' lesions block (by case, by lesion, matching rules), drawn on the site."""
    import pandas as pd

    results = json.loads((small_run / "results" / "kits23.json").read_text())
    lesions = results["lesions"]
    assert lesions["profile"] == "brats" and set(lesions["sensitivity"]["variants"]) == {"panoptica", "panoptica_merge", "brats2023"}
    tumor = lesions["case"]["structures"]["tumor"]
    assert tumor["n_cases"] == len(CASES) and {"rq", "pq_dice", "lesion_dice"} <= set(tumor["metrics"])
    for model in MODELS:
        table = pd.read_csv(small_run / "scores" / "kits23" / model / "instances.csv", dtype={"case_id": str})
        mine = table[(table.structure == "tumor") & (table.lesion_profile == "brats")]
        counts = lesions["counts"]["tumor"][model]
        assert (counts["tp"], counts["fn"], counts["fp"]) == tuple(int((mine.status == s).sum()) for s in ("TP", "FN", "FP"))
        assert lesions["lesion"]["structures"]["tumor"]["metrics"]["detected"]["models"][model]["n"] == counts["tp"] + counts["fn"]
    artifacts = sorted(p.name for p in (small_run / "mlruns").rglob("*.csv") if p.name in ("instances.csv", "per_case_lesions.csv"))
    assert artifacts == ["instances.csv"] * len(MODELS) + ["per_case_lesions.csv"] * len(MODELS)
    assert 'id="lesions"' in (small_run / "site" / "kits23.html").read_text()


def test_results_record_the_version_of_everything_used(small_run: Path) -> None:
    """Data (data.dvc md5), weights, model, segbench and segauge per model; the git commit only in MLflow.

    The commit is no part of any DVC output (they must not change with every commit); each MLflow run
    records the commit it was logged at."""
    results = json.loads((small_run / "results" / "kits23.json").read_text())
    data_md5 = yaml.safe_load((small_run / "data.dvc").read_text())["outs"][0]["md5"]
    assert results["dataset"]["version"] == data_md5 and results["segbench_version"] == segbench.__version__
    for model, entry in results["models"].items():
        config = yaml.safe_load((small_run / "conf" / "model" / f"{model}.yaml").read_text())[model]
        assert entry["versions"] == {
            "dataset": "kits23",
            "dataset_version": data_md5,
            "hd95_definition": results["hd95_definition"],
            "kind": "simulated",
            "lesion_profile": results["lesions"]["profile"],
            "metric_profile": results["metric_profile"],
            "model": model,
            "model_version": str(config["version"]),
            "segauge_version": segauge.__version__,
            "segbench_version": segbench.__version__,
            "weights_version": "none",  # a simulated model has no weights
        }
    with sqlite3.connect(small_run / "mlruns" / "mlflow.db") as db:
        commits = db.execute("SELECT DISTINCT value FROM tags WHERE key = 'mlflow.source.git.commit'").fetchall()
    assert commits == [(base_commit(small_run),)]


def test_second_repro_reruns_nothing(small_run: Path) -> None:
    out = run(["dvc", "repro"], small_run)
    assert "Running stage" not in out, out


def test_compare_twice_is_byte_identical(projects: Projects) -> None:
    project = projects.copy(SMALL)
    before = (project / "results" / "kits23.json").read_bytes()
    run(["segbench", "compare", "--dataset", "kits23"], project)
    assert (project / "results" / "kits23.json").read_bytes() == before


def test_fresh_clone_pulls_instead_of_recomputing(projects: Projects, tmp_path: Path) -> None:
    """A maintainer pushes to the project's remote; a reader's plain `dvc pull` brings data and every output,
    and `dvc repro` then runs no stage and changes no byte: the clone's git status stays clean."""
    project = projects.copy(SMALL)
    remote = tmp_path / "remote"
    run(["dvc", "remote", "add", "-d", "store", str(remote)], project)
    run(["dvc", "push"], project)
    commit_all(project, "experiment")
    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(project), str(clone)], tmp_path)
    run(["dvc", "pull"], clone)
    assert _output_digests(clone) == _output_digests(project)
    out = run(["dvc", "repro"], clone)
    assert "Running stage" not in out, out
    assert _output_digests(clone) == _output_digests(project)
    assert run(["git", "status", "--porcelain"], clone) == ""
    assert not (clone / "mlruns" / "mlflow.db").exists()  # nothing reran, so this machine has no store yet ...
    run(["segbench", "track"], clone)  # ... until the pulled score bundles are logged (compare adds the leaderboards)
    assert mlflow_runs(clone) == [run for run in EXPECTED_RUNS if run[1] != "leaderboard"]


def _output_digests(project: Path) -> dict[Path, str]:
    """sha256 of every file the pipeline wrote (predictions to site), by relative path."""
    folders = ("predictions", "scores", "tracking", "results", "metrics", "plots", "crossdataset", "site")
    files = (path for folder in folders for path in (project / folder).rglob("*") if path.is_file())
    return {path.relative_to(project): hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


def test_fresh_clone_recomputing_everything_writes_the_same_bytes(small_run: Path, tmp_path: Path) -> None:
    """The same commit cloned afresh, only the data pulled: every stage reruns, every output file is the same."""
    clone = tmp_path / "scratch"
    run(["git", "clone", "-q", str(small_run), str(clone)], tmp_path)
    run(["git", "checkout", "-q", base_commit(small_run)], clone)
    run(["dvc", "pull", "-q", "data.dvc"], clone)
    out = run(["dvc", "repro"], clone)
    for stage in ("predict@kits23-sim_dilate_1mm", "score@kits23-sim_missed_lesion", "import@segauge_kits23_seed", "compare@kits23"):
        assert f"Running stage '{stage}'" in out, out
    outputs = _output_digests(small_run)
    assert {path.parts[0] for path in outputs} == {"predictions", "scores", "tracking", "results", "metrics", "plots", "crossdataset", "site"}
    assert _output_digests(clone) == outputs
