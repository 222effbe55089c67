"""The interactive benchmark end to end: `dvc repro interactive/dvc.yaml` with real dvc, MLflow and Chromium.

The classical baseline (region growing, seconds per step) runs on the bundle's three real scans (CT, MR,
CT DICOM series) against TotalSegmentator's outputs, a PSEUDO-REFERENCE. LiteMedSAM is left out here
(minutes on a CPU; tests/interactive/test_litemedsam.py runs it); the committed interactive/dvc.lock has its run.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from browser import Browser, find_chromium
from projects import Experiment, Projects
from segbench.interactive import scores
from tests_support import lock_outs
from tests_support import run_command as run

INTERACTIVE = Experiment(("model@interactive_model=[region_growing]", "stats.n_resamples=200", "published=[]"), interactive=True)
(PIPELINE,) = INTERACTIVE.pipeline

pytestmark = pytest.mark.slow


@pytest.fixture
def interactive_run(projects: Projects) -> Path:
    """The interactive pipeline reproduced (shared: read only)."""
    return projects.reproduced(INTERACTIVE)


def test_results_carry_per_step_scores_per_case_and_per_organ(interactive_run: Path) -> None:
    results = json.loads((interactive_run / "interactive" / "results" / "totalseg_example.json").read_text())
    assert results["dataset"]["interactive"] and results["dataset"]["reference"] == "PSEUDO-REFERENCE"
    assert list(results["models"]) == ["region_growing"]
    assert results["metrics"]["TotalRunningTime"] == {"higher_is_better": False}
    structures = results["analysis"]["structures"]
    # the DICOM series holds spleen, liver and stomach only; the CT and the MR also both kidneys
    assert {s: b["n_cases"] for s, b in structures.items()} == {
        "mean_over_classes": 3,
        "spleen": 3,
        "liver": 3,
        "stomach": 3,
        "kidney_left": 2,
        "kidney_right": 2,
    }
    table = pd.read_csv(interactive_run / "interactive" / "scores" / "totalseg_example" / "region_growing" / "metrics.csv")
    assert sorted(table["CaseName"]) == ["ct.npz", "ct_dicom.npz", "mr.npz"] and (table["reference"] == "PSEUDO-REFERENCE").all()
    cell = structures["mean_over_classes"]["metrics"]["DSC_AUC"]["models"]["region_growing"]
    assert cell["mean"] == pytest.approx(table["DSC_AUC"].mean())
    assert cell["ci_low"] <= cell["mean"] <= cell["ci_high"]
    # a class row's AUC is the trapezoid over its own click steps
    rows = pd.read_csv(interactive_run / "interactive" / "scores" / "totalseg_example" / "region_growing" / "per_case.csv")
    liver = rows[(rows["structure"] == "liver") & (rows["case_id"] == "ct")].iloc[0]
    steps = [liver[f"DSC_{i}"] for i in range(2, 7)]
    assert liver["DSC_AUC"] == pytest.approx(sum((a + b) / 2 for a, b in zip(steps, steps[1:])))


def test_mlflow_run_has_step_metrics_and_the_challenge_table(interactive_run: Path, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    with sqlite3.connect(interactive_run / "mlruns" / "mlflow.db") as db:
        (run_id,) = db.execute("SELECT run_uuid FROM runs WHERE name = 'region_growing' AND status = 'FINISHED'").fetchone()
        history = db.execute("SELECT step, value FROM metrics WHERE run_uuid = ? AND key = 'DSC' ORDER BY step", (run_id,)).fetchall()
        tags = dict(db.execute("SELECT key, value FROM tags WHERE run_uuid = ?", (run_id,)).fetchall())
        leaderboards = db.execute("SELECT COUNT(*) FROM runs WHERE name = 'leaderboard' AND status = 'FINISHED'").fetchone()[0]
    table = pd.read_csv(interactive_run / "interactive" / "scores" / "totalseg_example" / "region_growing" / "metrics.csv")
    assert [s for s, _ in history] == [1, 2, 3, 4, 5, 6]
    assert [v for _, v in history] == pytest.approx([table[f"DSC_{i}"].mean() for i in range(1, 7)])
    assert tags["segbench.reference"] == "PSEUDO-REFERENCE" and tags["segbench.kind"] == "interactive"
    assert leaderboards == 1
    client = MlflowClient(f"sqlite:///{interactive_run / 'mlruns' / 'mlflow.db'}")
    logged = json.loads(Path(client.download_artifacts(run_id, "per_case.json", str(tmp_path))).read_text())
    assert set(scores.REQUIRED_COLUMNS) <= set(logged["columns"])


def test_site_draws_the_interaction_curves(interactive_run: Path, tmp_path: Path) -> None:
    page = interactive_run / "interactive" / "site" / "totalseg_example.html"
    text = page.read_text(encoding="utf-8")
    assert "Interaction curves" in text and "PSEUDO-REFERENCE" in text
    chromium = find_chromium()
    assert chromium, "chromium is needed (apt-get install chromium)"
    with Browser(chromium, tmp_path / "profile") as browser:
        visit = browser.visit(page)
    assert visit.errors == [] and visit.remote_requests == []
    assert visit.plots == text.count('class="plotly-graph-div"') >= 12  # DSC and NSD for each of the 6 structures


def test_second_repro_reruns_nothing_and_predictions_reproduce(projects: Projects) -> None:
    project = projects.copy(INTERACTIVE)  # its interact stage reruns
    out = run(["dvc", "repro", PIPELINE], project)
    assert "Running stage" not in out
    before = lock_outs(project / "interactive" / "dvc.lock")
    run(["dvc", "repro", "-f", "-s", f"{PIPELINE}:interact@totalseg_example-region_growing"], project)
    after = lock_outs(project / "interactive" / "dvc.lock")
    predictions = "interactive/predictions/totalseg_example/region_growing"
    assert after[predictions] == before[predictions]  # segmentations, prompts and per-step scores: byte for byte
    assert before["interactive/cases/totalseg_example"] == after["interactive/cases/totalseg_example"]
