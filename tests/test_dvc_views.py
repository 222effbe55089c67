"""DVC's own views of the leaderboard: `dvc exp show` and `dvc metrics show` carry the heads, `dvc plots` the CIs;
and `dvc status` after a change of the statistics settings: only the leaderboards are stale, never the scores.

A throwaway project (2 real KiTS23 cases, 2 simulated models and a small published set, B = 300) runs
`dvc exp run -S ...` exactly as a user changes an experiment; the heads of every leaderboard must then be
columns of `dvc exp show --json`.
"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests_support import command_env, commit_all, new_project, run_command

CASES = ["case_00030", "case_00110"]
MODELS = ["sim_dilate_1mm", "sim_missed_lesion"]
OVERRIDES = [f"model=[{','.join(MODELS)}]", f"dataset.kits23.cases=[{','.join(CASES)}]", "stats.n_resamples=300", "published=[segauge_kits23_seed]"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    proj = new_project(root, tmp_path_factory.mktemp("views") / "proj", OVERRIDES)
    commit_all(proj, "base")
    run_command(["dvc", "repro"], proj)
    commit_all(proj, "baseline run")
    return proj


def _exp_show(project: Path) -> list[dict]:
    """`dvc exp show --json`, parsed (stdout only: dvc may log to stderr)."""
    result = subprocess.run(["dvc", "exp", "show", "--json"], cwd=project, env=command_env(), capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def test_a_statistics_setting_reruns_the_leaderboards_only(project: Path) -> None:
    """Scores (and imported score sets) carry no statistic, so a new CI method leaves them and their MLflow runs alone."""
    params_file = project / "params.yaml"
    before = params_file.read_text(encoding="utf-8")
    params = yaml.safe_load(before)
    assert params["stats"]["ci_method"] == "percentile"
    params["stats"]["ci_method"] = "bca"
    params_file.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    try:
        result = subprocess.run(["dvc", "status", "--json"], cwd=project, env=command_env(), capture_output=True, text=True, check=True)
    finally:
        params_file.write_text(before, encoding="utf-8")
    assert set(json.loads(result.stdout)) == {"compare@kits23", "compare-published@segauge_kits23_seed"}


def test_metrics_file_holds_every_leaderboard_head(project: Path) -> None:
    results = json.loads((project / "results" / "kits23.json").read_text())
    heads = json.loads((project / "metrics" / "kits23.json").read_text())
    for structure, block in results["analysis"]["structures"].items():
        for metric, cell in block["metrics"].items():
            head = heads[structure][metric]
            first, second = cell["ranking"]["order"][:2]
            assert (head["first"], head["second"]) == (first, second)
            assert head["mean"] == cell["models"][first]["mean"] and head["ci_low"] == cell["models"][first]["ci_low"]
            assert head["p_rank1"] == cell["ranking"]["p_rank1"][first]
            pair = next(p for p in cell["pairwise"] if (p["a"], p["b"]) == (first, second))
            assert head["second_separable"] is bool(pair["separable"])
            assert head["second_significant"] is bool(cell["significance"]["significant"][first][second])
    shown = run_command(["dvc", "metrics", "show"], project)
    assert "kidney_and_mass.dice.p_rank1" in shown and "metrics/kits23.json" in shown


def test_plot_rows_are_each_models_mean_and_ci(project: Path) -> None:
    results = json.loads((project / "results" / "kits23.json").read_text())
    with (project / "plots" / "kits23.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3 * 5 * len(MODELS)  # regions x metrics x models
    row = next(r for r in rows if r["cell"] == "tumor hd95" and r["model"] == "sim_missed_lesion")
    estimate = results["analysis"]["structures"]["tumor"]["metrics"]["hd95"]["models"]["sim_missed_lesion"]
    assert [float(row[k]) for k in ("mean", "ci_low", "ci_high")] == [estimate[k] for k in ("mean", "ci_low", "ci_high")]
    out = project / "plots_html"
    run_command(["dvc", "plots", "show", "--out", str(out)], project)
    page = (out / "index.html").read_text()
    assert "ci_high" in page and "sim_missed_lesion" in page  # the mean_ci template, filled with the rows


def test_exp_run_shows_the_heads_in_exp_show(project: Path) -> None:
    # -S recomposes params.yaml from conf/ (Hydra), so the experiment restates the project's own overrides
    changed = [o for o in OVERRIDES if not o.startswith("stats.n_resamples=")] + ["stats.n_resamples=500"]
    overrides = [arg for override in changed for arg in ("-S", override)]
    run_command(["dvc", "exp", "run", "-n", "b500", *overrides], project)
    experiments = _exp_show(project)
    runs = {
        exp["name"]: exp for baseline in experiments for exp in (baseline.get("experiments") or [])
        for exp in (exp.get("revs") or [exp])
    }
    assert "b500" in runs, sorted(runs)
    data = runs["b500"]["data"]
    heads = data["metrics"]["metrics/kits23.json"]["data"]
    assert data["params"]["params.yaml"]["data"]["stats"]["n_resamples"] == 500
    assert set(heads) == {"kidney_and_mass", "mass", "tumor"}
    assert heads["kidney_and_mass"]["dice"]["first"] in MODELS
    assert 0 <= heads["tumor"]["nsd"]["p_rank1"] <= 1
    table = run_command(["dvc", "exp", "show", "--no-pager", "--csv"], project)
    assert "kidney_and_mass.dice.first" in table.splitlines()[0]
