"""A folder of predictions made elsewhere onto the leaderboard by configuration only (kind ``predictions``,
conf/predictions/), with real dvc, MLflow and KiTS23 label maps. The folders are fabricated from the SIMULATED model
sim_dilate_1mm's predictions in the session's small experiment (tests/support/projects.py): 3 of its 4 cases, so the example's
scores there equal sim_dilate_1mm's."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import yaml

from projects import SMALL, Projects
from projects import SMALL_CASES as CASES
from repo_paths import DOCS
from segbench.config.params import parse_params
from segbench.config.validation import compose_params
from segbench.models.runner import predict
from tests_support import command_env, commit_all, in_directory
from tests_support import run_command as run

GUIDE = DOCS / "guide.md"
HELD = CASES[:3]  # the cases the folder holds
SOURCE = "sim_dilate_1mm"  # the SIMULATED model of the experiment whose files the folder holds


def test_a_link_out_of_the_folder_or_a_lying_header_is_refused_unread(root: Path, tmp_path: Path) -> None:
    """The folder's files are untrusted: a symlink to a file outside it and a header claiming a huge grid count as missing
    cases, each with its reason in the manifest; the good file is staged; the folder's digest is recorded."""
    folder = tmp_path / "userdata" / "example_subset"  # where the composition check finds the worked example's folder
    folder.mkdir(parents=True)
    with in_directory(tmp_path):
        raw = compose_params(root / "conf", ["model=[sim_dilate_1mm]", f"dataset.kits23.cases=[{','.join(CASES[:3])}]", "predictions=[example_subset]"])
    raw["predictions"]["example_subset"]["path"] = str(folder)
    params = parse_params(raw, root)
    dataset = params.dataset("kits23")
    reference = dataset.reference_dir / f"{CASES[0]}.nii.gz"
    shutil.copyfile(reference, folder / f"{CASES[0]}.nii.gz")
    (folder / f"{CASES[1]}.nii.gz").symlink_to(reference)  # a link out of the folder: never followed
    header = nib.Nifti1Header()
    header.set_data_shape((4096, 4096, 4096))
    header.set_data_dtype(np.uint8)
    (folder / f"{CASES[2]}.nii.gz").write_bytes(gzip.compress(header.binaryblock + b"\0" * 4))  # a header that lies
    with in_directory(root):
        manifest = predict(dataset, params.model("example_subset"), tmp_path / "out")
    assert manifest["missing"] == CASES[1:3]
    assert "a symlink, not a regular file; refused unread" in manifest["refused"][CASES[1]]
    assert "header says shape (4096, 4096, 4096), over 8 times the reference grid" in manifest["refused"][CASES[2]]
    assert manifest["source"]["files"] == 2 and len(manifest["source"]["sha256"]) == 64
    assert (tmp_path / "out" / f"{CASES[0]}.nii.gz").is_file() and manifest["regions"]["kidney_and_mass"]["spot_check_dice"] == 1.0


def fabricate(project: Path, folder: Path) -> None:
    """The folder a user would bring: the held cases' files of SOURCE, nothing else."""
    folder.mkdir(parents=True)
    for case in HELD:
        shutil.copyfile(project / "predictions" / "kits23" / SOURCE / f"{case}.nii.gz", folder / f"{case}.nii.gz")


def exp_run(project: Path, *overrides: str) -> str:
    """`dvc exp run` with the experiment's overrides and ``overrides`` (each run composes conf/ anew: -S replaces)."""
    return run(["dvc", "exp", "run", *(arg for o in (*SMALL.overrides, *overrides) for arg in ("-S", o))], project)


def ran_stages(output: str) -> set[str]:
    return set(re.findall(r"Running stage '([^']+)'", output))


def board_estimates(results: dict) -> dict:
    """Every board model's estimates, per structure and metric."""
    return {(s, m): cell["models"] for s, block in results["analysis"]["structures"].items() for m, cell in block["metrics"].items()}


@pytest.mark.slow
def test_a_folder_joins_by_config_only_and_moves_no_other_number(committed_copy: Path) -> None:
    before = json.loads((committed_copy / "results" / "kits23.json").read_text())
    fabricate(committed_copy, committed_copy / "userdata" / "example_subset")
    run(["dvc", "add", "-q", "userdata/example_subset"], committed_copy)  # as userdata/README.md does: data in DVC, never in git
    out = exp_run(committed_copy, "predictions=[example_subset]")
    assert ran_stages(out) == {
        "predictions@example_subset",
        "score-predictions@example_subset",
        "track-predictions@example_subset",
        "compare@kits23",
        "cross-dataset",
        "report",
    }, out  # cross-dataset reads every results file
    results = json.loads((committed_copy / "results" / "kits23.json").read_text())
    coverage = results["coverage"]
    assert coverage["policy"] == coverage["applied"] == "own_cases"
    assert coverage["models"] == {"example_subset": {"n_cases": 3, "of": 4, "missing": sorted(set(CASES) - set(HELD))}}
    # the other models' estimates are those of the run without the folder
    assert board_estimates(results) == board_estimates(before)
    assert "example_subset" not in results["analysis"]["models"]
    # its own analysis: its cases, every board model on them; its files are SOURCE's, so are its scores there
    own = coverage["analyses"]["example_subset"]["structures"]["kidney_and_mass"]
    assert own["n_cases"] == 3 and sorted(own["case_ids"]) == sorted(HELD)
    dice = own["metrics"]["dice"]["per_case"]
    assert dice["example_subset"] == dice[SOURCE]
    held = [before["analysis"]["structures"]["kidney_and_mass"]["case_ids"].index(c) for c in own["case_ids"]]
    assert dice[SOURCE] == [before["analysis"]["structures"]["kidney_and_mass"]["metrics"]["dice"]["per_case"][SOURCE][i] for i in held]
    manifest = json.loads((committed_copy / "predictions" / "kits23" / "example_subset" / "manifest.json").read_text())
    assert manifest["kind"] == "predictions" and manifest["source"]["path"] == "userdata/example_subset" and manifest["source"]["files"] == 3
    assert manifest["missing"] == sorted(set(CASES) - set(HELD), key=CASES.index)
    # every view says it: segbench show, the site, MLflow (the model's run and the leaderboard's), and reanalyze checks it
    shown = run(["segbench", "show"], committed_copy)
    assert "example_subset: 3 of 4 cases (no prediction for 1; estimated on its own cases, beside the leaderboard)" in shown
    assert "example_subset, 3 of 4 cases (beside the leaderboard):" in run(["segbench", "show", "--detail"], committed_copy)
    page = (committed_copy / "site" / "kits23--kidney_and_mass.html").read_text()
    assert "example_subset, 3 of 4 cases (beside the leaderboard)" in page
    with sqlite3.connect(committed_copy / "mlruns" / "mlflow.db") as db:
        tags = dict(
            db.execute(
                "SELECT t.key, t.value FROM tags t JOIN runs r USING (run_uuid) WHERE r.name IN ('example_subset', 'leaderboard') AND t.key LIKE '%coverage%'"
            ).fetchall()
        )
    assert tags["segbench.coverage"] == "3 of 4 cases (no prediction for 1)"
    assert tags["coverage.example_subset"].startswith("3 of 4 cases")
    assert "every statistic re-derived" in run(["segbench", "reanalyze", "results/kits23.json"], committed_copy)
    # the run's headline means are over its own 3 cases (SOURCE's numbers there), never with the 4th counted as a failure
    metrics = _run_metrics(committed_copy, "example_subset")
    assert metrics["n_cases"] == 3 and metrics["coverage"] == 0.75
    assert metrics["kidney_and_mass.dice.mean"] == round(float(np.mean(dice[SOURCE])), 3) > 0.5
    table = {(r["model"], r["structure"], r["metric"]): r for r in json.loads(run(["segbench", "show", "--format", "json"], committed_copy))}
    assert table[("example_subset", "kidney_and_mass", "dice")]["coverage"] == 0.75
    assert table[("example_subset", "kidney_and_mass", "dice")]["n"] == 3


def _run_metrics(project: Path, name: str) -> dict[str, float]:
    """The latest metrics of the model run ``name`` in the project's MLflow store."""
    with sqlite3.connect(project / "mlruns" / "mlflow.db") as db:
        return dict(db.execute("SELECT m.key, m.value FROM latest_metrics m JOIN runs r USING (run_uuid) WHERE r.name = ?", (name,)).fetchall())


@pytest.mark.slow
def test_mlflow_s_runs_table_shows_the_partial_model_s_own_means_and_coverage(committed_copy: Path, tmp_path: Path) -> None:
    """After the folder joined (the test above): the experiment's saved runs view in Chromium shows the model's n_cases and
    coverage columns and its Dice over its own cases, as the terminal prints it."""
    from mlflow.tracking import MlflowClient

    from browser import Browser, find_chromium
    from mlflow_pages import RUNS_READY, RUNS_TABLE
    from services import mlflow_server

    chromium = find_chromium()
    assert chromium, "chromium not found: apt-get install chromium"
    uri = f"sqlite:///{committed_copy / 'mlruns' / 'mlflow.db'}"
    experiment = MlflowClient(uri).get_experiment_by_name("segbench/kits23")
    metrics = _run_metrics(committed_copy, "example_subset")
    link = f"#/experiments/{experiment.experiment_id}/runs?workflowType=machine_learning&viewStateShareKey=segbench"
    with mlflow_server(uri, tmp_path / "server", workers=1) as server, Browser(chromium, tmp_path / "profile", timeout=180) as browser:
        visit = browser.visit(f"{server.uri}/{link}", script=RUNS_TABLE, width=2600, ready=RUNS_READY % json.dumps(["example_subset"]))
    table = json.loads(visit.result)
    assert {"n_cases", "coverage", "kidney_and_mass.dice.mean"} <= set(table["header"]), table["header"]
    row = next(r for r in table["rows"] if " example_subset " in f" {r} ")
    for value in ("3", "0.75", repr(metrics["kidney_and_mass.dice.mean"])):
        assert f" {value} " in f" {row} ", (value, row)


@pytest.mark.slow
def test_a_folder_imported_with_dvc_import_reproduces_on_a_new_clone(committed_copy: Path, tmp_path: Path) -> None:
    """`dvc import` of a folder from another DVC repository; the project pushed, cloned, pulled: `dvc repro` reruns nothing."""
    source = tmp_path / "lab"
    source.mkdir()
    run(["git", "init", "-q"], source)
    run(["dvc", "init", "-q"], source)
    fabricate(committed_copy, source / "preds")
    run(["dvc", "add", "-q", "preds"], source)
    run(["dvc", "remote", "add", "-d", "store", str(tmp_path / "lab-remote")], source)
    run(["dvc", "push", "-q"], source)
    commit_all(source, "predictions")
    run(["dvc", "import", "-q", str(source), "preds", "-o", "userdata/imported"], committed_copy)
    config = yaml.safe_load((committed_copy / "conf" / "predictions" / "example_subset.yaml").read_text())["example_subset"]
    (committed_copy / "conf" / "predictions" / "imported.yaml").write_text(yaml.safe_dump({"imported": {**config, "path": "userdata/imported"}}))
    commit_all(committed_copy, "import a folder of predictions")  # its .dvc file in git, as a user commits it before an experiment
    out = exp_run(committed_copy, "predictions=[imported]")
    assert "predictions@imported" in ran_stages(out) and not {s for s in ran_stages(out) if s.startswith(("predict@", "score@"))}
    run(["dvc", "remote", "add", "-d", "-f", "own", str(tmp_path / "remote")], committed_copy)
    run(["dvc", "push", "-q"], committed_copy)
    commit_all(committed_copy, "with an imported folder of predictions")
    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(committed_copy), str(clone)], tmp_path)
    run(["dvc", "pull", "-q"], clone)
    assert (clone / "userdata" / "imported" / f"{HELD[0]}.nii.gz").is_file()
    out = run(["dvc", "repro"], clone)
    assert not ran_stages(out), out
    assert json.loads((clone / "results" / "kits23.json").read_text())["coverage"]["models"]["imported"]["n_cases"] == 3


def _way_back(model: str) -> list[str]:
    """docs/guide.md's "The way back" commands, for ``model`` of kits23 (the guide's are for `mine`)."""
    section = GUIDE.read_text(encoding="utf-8").split("### The way back", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip().replace("mine", model) for line in block.splitlines() if line.strip()]


def _runs(project: Path) -> tuple[list[str], list[str]]:
    """The MLflow store's active runs (what its runs table shows) and every run, by id."""
    with sqlite3.connect(project / "mlruns" / "mlflow.db") as db:
        every = db.execute("SELECT run_uuid, lifecycle_stage FROM runs ORDER BY run_uuid").fetchall()
    return [run for run, stage in every if stage == "active"], [run for run, _ in every]


@pytest.mark.slow
def test_the_way_back_leaves_git_dvc_and_mlflow_as_they_were(projects: Projects) -> None:
    """The guide's way back, run as written after `dvc exp run` of a folder of predictions: `git status --porcelain`
    empty, `dvc status` and MLflow's runs (active and all, by id) as before the experiment, none of the model's outputs left."""
    proj = projects.copy(SMALL)
    fabricate(proj, proj / "userdata" / "example_subset")
    run(["dvc", "add", "-q", "userdata/example_subset"], proj)
    commit_all(proj, "a folder of predictions, tracked")  # as the guide asks: its .dvc file committed before the experiment
    status, runs = run(["dvc", "status"], proj), _runs(proj)
    assert run(["git", "status", "--porcelain"], proj) == ""
    exp_run(proj, "predictions=[example_subset]")
    active, every = _runs(proj)
    assert len(active) >= len(runs[0]) + 2, (active, runs)  # the model's run and a new leaderboard run
    for line in _way_back("example_subset"):
        done = subprocess.run(["bash", "-c", line], cwd=proj, env=command_env(), capture_output=True, text=True, check=False)
        assert done.returncode == 0, (line, done.stdout, done.stderr)
    assert run(["git", "status", "--porcelain", "--untracked-files=all"], proj) == ""
    assert run(["dvc", "status"], proj) == status
    assert _runs(proj) == runs
    assert not [p.name for p in (proj / "predictions" / "kits23").iterdir() if "example_subset" in p.name]
    assert not (proj / "scores" / "kits23" / "example_subset").exists() and not (proj / "tracking" / "kits23" / "example_subset.json").exists()
    assert "every run of the store is named by a checked-out output" in run(["segbench", "prune-runs", "--dry-run"], proj)
