"""DVC's own views of the leaderboard: `dvc exp show` and `dvc metrics show` carry the heads, `dvc plots` the CIs;
and `dvc status` after a change of the statistics settings: only the leaderboards are stale, never the scores.

The session's small experiment (tests/support/projects.py: 4 real KiTS23 cases, 2 simulated models and a small published set,
B = 500), reproduced, is read as it is; a copy of it, its outputs committed, runs `dvc exp run -S ...` exactly as a user
changes an experiment; the heads of every leaderboard must then be columns of `dvc exp show --json`.
"""

from __future__ import annotations

import csv
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from browser import Browser, find_chromium
from projects import SMALL
from projects import SMALL_MODELS as MODELS
from segbench.base.formats import format_estimate
from segbench.stats.heads import ci_words
from segbench.stats.verdicts import CODE_NUMBER, CODE_WORDS
from tests_support import command_env, run_command

pytestmark = pytest.mark.slow
# the README's `dvc exp show` preset: one leaderboard cell (#1, mean [CI], verdict) across the experiments
EXP_SHOW_PRESET = ["--drop", ".*", "--keep", "Experiment|metrics/kits23/tumor/dice.json:(first|mean_ci|verdict)$"]
# True once vega-embed has drawn every plot of a `dvc plots show` page (its canvas, vega-embed's default renderer)
VEGA_READY = """(() => {
  const plots = document.querySelectorAll('.vega-embed').length, drawn = document.querySelectorAll('.vega-embed canvas').length;
  return JSON.stringify({ready: document.readyState === 'complete' && plots > 0 && drawn === plots, plots: drawn});
})()"""


def _exp_show(project: Path) -> list[dict]:
    """`dvc exp show --json`, parsed (stdout only: dvc may log to stderr)."""
    result = subprocess.run(["dvc", "exp", "show", "--json"], cwd=project, env=command_env(), capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def test_a_statistics_setting_reruns_the_leaderboards_only(committed_copy: Path) -> None:
    """Scores (and imported score sets) carry no statistic, so a new CI method leaves them and their MLflow runs alone."""
    project = committed_copy
    params_file = project / "params.yaml"
    before = params_file.read_text(encoding="utf-8")
    params = yaml.safe_load(before)
    assert params["stats"]["ci_method"] == "skew_t"
    params["stats"]["ci_method"] = "bca"
    params_file.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    try:
        result = subprocess.run(["dvc", "status", "--json"], cwd=project, env=command_env(), capture_output=True, text=True, check=True)
    finally:
        params_file.write_text(before, encoding="utf-8")
    assert set(json.loads(result.stdout)) == {"compare@kits23", "compare-published@segauge_kits23_seed"}


def _widest_line(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def _head_cells(results: dict) -> list[tuple[str, str, dict, int]]:
    """(file under metrics/kits23/, metric, cell, n) of every ranked leaderboard: the voxel-wise ones, then the
    lesion-wise ones by case and of matched lesions under lesions/."""
    analyses = (("", results["analysis"]), ("lesions/", results["lesions"]["case"]), ("lesions/", results["lesions"]["matched"]))
    return [
        (f"{prefix}{s}/{m}.json", m, cell, block["n_cases"])
        for prefix, analysis in analyses
        for s, block in analysis["structures"].items()
        for m, cell in block["metrics"].items()
        if cell.get("ranking")
    ]


def test_metrics_files_hold_every_leaderboard_head(small_run: Path) -> None:
    results = json.loads((small_run / "results" / "kits23.json").read_text())
    cells = _head_cells(results)
    assert "lesions/tumor/pq_dice.json" in [path for path, *_ in cells]
    assert sorted(p.relative_to(small_run / "metrics" / "kits23").as_posix() for p in (small_run / "metrics" / "kits23").rglob("*.json")) == sorted(
        path for path, *_ in cells
    )
    for path, metric, cell, n in cells:
        head = json.loads((small_run / "metrics" / "kits23" / path).read_text())
        first = cell["ranking"]["order"][0]
        estimate = cell["models"][first]
        code = cell["verdict"]["code"]  # the verdict in the words every view prints, its number beside for plots
        mean_ci = format_estimate(estimate["mean"], estimate["ci_low"], estimate["ci_high"], metric, cell["higher_is_better"])
        assert head == {
            "first": first,
            "mean": float(mean_ci.split()[0]),
            "verdict": CODE_WORDS[code],
            "verdict_number": CODE_NUMBER[code],
            "n": n,
            "mean_ci": mean_ci,
        }  # the mean as mean_ci prints it, not 16 digits
    shown = subprocess.run(["dvc", "metrics", "show"], cwd=small_run, env=command_env(), capture_output=True, text=True, check=True)
    assert shown.stderr == ""  # no "DVC failed to load some metrics"
    header, *rows = shown.stdout.splitlines()
    assert header.split() == ["Path", "first", "mean", "mean_ci", "n", "verdict", "verdict_number"]
    assert "✘ not separable" in shown.stdout or "✔ separable" in shown.stdout
    assert len([row for row in rows if row.startswith("metrics/kits23/")]) == len(cells) and "metrics/kits23/tumor/dice.json" in shown.stdout
    assert _widest_line(shown.stdout) <= 200


def test_a_fresh_clone_has_nothing_to_act_on(committed_copy: Path, root: Path) -> None:
    """After the README's two commands: `dvc status dvc.yaml` (the README's) is clean and `dvc metrics show` warns of
    nothing, although the interactive pipeline, present in every clone, has never run there."""
    project = committed_copy
    for name in ("interactive/dvc.yaml", "interactive/dvc.lock", "interactive/.gitignore"):
        (project / name).parent.mkdir(exist_ok=True)
        shutil.copy(root / name, project / name)
    try:
        assert "dvc status dvc.yaml" in (root / "README.md").read_text(encoding="utf-8")
        assert run_command(["dvc", "status", "dvc.yaml"], project).strip() == "Data and pipelines are up to date."
        unrun = json.loads(subprocess.run(["dvc", "status", "--json"], cwd=project, env=command_env(), capture_output=True, text=True, check=True).stdout)
        assert unrun and all(stage.startswith("interactive/dvc.yaml:") for stage in unrun)  # what plain `dvc status` adds
        shown = subprocess.run(["dvc", "metrics", "show"], cwd=project, env=command_env(), capture_output=True, text=True, check=True)
        assert shown.stderr == "" and "interactive/" not in shown.stdout
        plots = subprocess.run(["dvc", "plots", "show"], cwd=project, env=command_env(), capture_output=True, text=True, check=True)
        assert "interactive/" not in plots.stdout + plots.stderr
        assert run_command(["git", "status", "--porcelain", "--untracked-files=all", "--", ".", ":(exclude)interactive"], project) == ""  # no dvc_plots/
    finally:
        shutil.rmtree(project / "interactive")
        shutil.rmtree(project / "dvc_plots", ignore_errors=True)


def test_plot_rows_are_each_models_mean_and_ci(small_run: Path, tmp_path: Path) -> None:
    results = json.loads((small_run / "results" / "kits23.json").read_text())
    with (small_run / "plots" / "kits23.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3 * 5 * len(MODELS)  # regions x metrics x models
    row = next(r for r in rows if r["cell"] == "tumor hd95" and r["model"] == "sim_missed_lesion")
    cell = results["analysis"]["structures"]["tumor"]["metrics"]["hd95"]
    estimate = cell["models"]["sim_missed_lesion"]
    assert [float(row[k]) for k in ("mean", "ci_low", "ci_high")] == [estimate[k] for k in ("mean", "ci_low", "ci_high")]
    # each row names its CI as the site's plots do: the method used and, for a calibrated cell, its level
    assert row["interval"] == ci_words(results["analysis"]["settings"], cell["ci_confidence"]) and "skewness-corrected t" in row["interval"]
    out = tmp_path / "plots_html"
    run_command(["dvc", "plots", "show", "--out", str(out)], small_run)
    page = (out / "index.html").read_text()
    assert "ci_high" in page and "sim_missed_lesion" in page  # the mean_ci template, filled with the rows
    assert json.dumps(row["interval"])[1:-1] in page and "bootstrap CI" not in page
    chromium = find_chromium()
    assert chromium, "chromium is needed (apt-get install chromium)"
    with Browser(chromium, tmp_path / "profile") as browser:  # vega inline (.dvc/plots/page.html): it draws offline
        visit = browser.visit(out / "index.html", ready=VEGA_READY)
    assert visit.errors == [] and visit.remote_requests == [] and visit.plots == page.count("vegaEmbed(") >= 1


def test_exp_run_shows_the_heads_in_exp_show(committed_copy: Path, root: Path) -> None:
    project = committed_copy
    # -S recomposes params.yaml from conf/ (Hydra), so the experiment restates the project's own overrides
    changed = [o for o in SMALL.overrides if not o.startswith("stats.n_resamples=")] + ["stats.n_resamples=300"]
    assert len(changed) == len(SMALL.overrides)  # B changed, nothing else
    overrides = [arg for override in changed for arg in ("-S", override)]
    run_command(["dvc", "exp", "run", "-n", "b300", *overrides], project)
    experiments = _exp_show(project)
    runs = {exp["name"]: exp for baseline in experiments for exp in (baseline.get("experiments") or []) for exp in (exp.get("revs") or [exp])}
    assert "b300" in runs, sorted(runs)
    data = runs["b300"]["data"]
    assert data["params"]["params.yaml"]["data"]["stats"]["n_resamples"] == 300
    results = json.loads((project / "results" / "kits23.json").read_text())
    heads = {path: entry["data"] for path, entry in data["metrics"].items() if path.startswith("metrics/kits23/")}
    assert set(heads) == {f"metrics/kits23/{path}" for path, *_ in _head_cells(results)}
    assert heads["metrics/kits23/kidney_and_mass/dice.json"]["first"] in MODELS
    # the README's preset: one cell across the experiments, legible in 200 columns
    table = subprocess.run(
        ["dvc", "exp", "show", "--no-pager", *EXP_SHOW_PRESET], cwd=project, env={**command_env(), "COLUMNS": "200"}, capture_output=True, text=True, check=True
    ).stdout
    assert "b300" in table and heads["metrics/kits23/tumor/dice.json"]["first"] in table and "…" not in table, table
    assert shlex.join(["dvc", "exp", "show", *EXP_SHOW_PRESET]) in (root / "README.md").read_text(encoding="utf-8")
    assert _widest_line(table) <= 200
    diff = run_command(["dvc", "metrics", "diff", "--all"], project)  # b300's heads (the workspace) beside the baseline's, changed or not
    assert "metrics/kits23/" in diff and _widest_line(diff) <= 200


def test_plot_titles_name_no_fixed_level_or_method(root: Path) -> None:
    """`dvc plots show` once titled every plot "95% bootstrap CI" over skew_t intervals at calibrated levels: the template's
    and dvc.yaml's titles fix neither a level nor a method, and each panel's header reads the rows' ``interval``."""
    template = json.loads((root / ".dvc" / "plots" / "mean_ci.json").read_text(encoding="utf-8"))
    stages = yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    plots = [(path, props) for stage in stages.values() for entry in stage.get("do", stage).get("plots", []) for path, props in entry.items()]
    assert {props["template"] for _, props in plots} == {"mean_ci"} and len(plots) == 2

    def titles(node: object) -> list[str]:
        if isinstance(node, dict):
            return [str(v) for k, v in node.items() if k in ("title", "text") and v] + [t for v in node.values() for t in titles(v)]
        return [t for v in node for t in titles(v)] if isinstance(node, list) else []

    for text in titles(template) + [props["title"] for _, props in plots]:
        assert not re.search(r"\d\s*%|bootstrap|percentile|skew|BCa|0\.05|0\.95", text), text
    panel = template["facet"]["row"]["field"]
    assert any(t.get("as") == panel and "datum.interval" in t["calculate"] for t in template["transform"])
