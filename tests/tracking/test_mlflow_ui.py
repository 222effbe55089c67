"""MLflow the way its users browse it: a real store built by the stages, a real `mlflow server`, real Chromium.

The session's small experiment (tests/support/projects.py), reproduced: predict -> score -> track -> compare for two simulated
models on four real KiTS23 cases and import -> track -> compare for a real published set (B = 500). `mlflow server`
(tests/support/services.py) serves a copy of that store on the loopback interface; headless Chromium opens the experiment and
reads the runs table.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from browser import Browser, find_chromium
from mlflow_pages import RUNS_READY, RUNS_TABLE
from projects import SMALL, SMALL_PUBLISHED, Projects
from projects import SMALL_CASES as CASES
from projects import SMALL_MODELS as MODELS
from segbench.base.formats import format_estimate
from segbench.cli import main
from segbench.stats.verdicts import CODE_NUMBER, CODE_WORDS
from segbench.tracking import runs as tracking
from services import mlflow_server
from tests_support import in_directory, run_command


@pytest.fixture(scope="module")
def served(projects: Projects, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A copy of the small experiment reproduced, and `mlflow server` on its store (bound to 127.0.0.1 on a free port, always stopped)."""
    proj = projects.copy(SMALL)
    with mlflow_server(tracking_uri(proj), tmp_path_factory.mktemp("mlflow_server"), workers=1) as server:
        yield proj, server.uri


def tracking_uri(project: Path) -> str:
    return f"sqlite:///{project / 'mlruns' / 'mlflow.db'}"


def _runs(project: Path, dataset: str) -> list:
    client = MlflowClient(tracking_uri(project))
    experiment = client.get_experiment_by_name(tracking.experiment_name(dataset))
    return client.search_runs([experiment.experiment_id])


# true once MLflow's artifact view has shown an HTML artifact in its iframe for 8 s (plotly draws inside it)
IFRAME_READY = """(() => { const frame = document.querySelector('iframe');
  if (frame && !window.segbenchSeen) { window.segbenchSeen = performance.now(); }
  return JSON.stringify({ready: Boolean(frame) && performance.now() - window.segbenchSeen > 8000, plots: 0}); })()"""


def screenshot_dir(tmp_path: Path) -> Path:
    return Path(os.environ["SEGBENCH_SCREENSHOTS"]) if os.environ.get("SEGBENCH_SCREENSHOTS") else tmp_path


@pytest.mark.slow
def test_runs_table_shows_every_run_with_its_dataset_and_headline_metrics(served: tuple[Path, str], tmp_path: Path) -> None:
    """The experiment description's link opens the runs table with each model's mean Dice per structure and, on the
    leaderboard run, #1's mean and the verdict in words, without choosing a column (MLflow 3.17 shows no metric by
    default); every mean as the site rounds it, not 16 digits."""
    project, server = served
    chromium = find_chromium()
    assert chromium, "chromium not found: apt-get install chromium"
    runs = _runs(project, "kits23")
    names = sorted(r.info.run_name for r in runs)
    assert names == sorted([*MODELS, tracking.LEADERBOARD_KIND])
    experiment_id = runs[0].info.experiment_id
    shot = screenshot_dir(tmp_path) / "mlflow-runs-kits23.png"
    # MLflow 3.17 opens an experiment on the view of the sidebar's workflow switch (GenAI by default);
    # workflowType=machine_learning is the "Model training" side of the switch, viewStateShareKey the saved view
    link = f"#/experiments/{experiment_id}/runs?workflowType=machine_learning&viewStateShareKey={tracking.VIEW_KEY}"
    experiment = MlflowClient(tracking_uri(project)).get_experiment(experiment_id)
    assert f"]({link})" in experiment.tags["mlflow.note.content"]
    board = next(r for r in runs if r.info.run_name == tracking.LEADERBOARD_KIND)
    page = f"{server}/#/experiments/{experiment_id}/runs/{board.info.run_id}/artifacts/kits23.html?workflowType=machine_learning"
    with Browser(chromium, tmp_path / "profile", timeout=180) as browser:
        # wide enough that the grid renders every headline column (it leaves out columns scrolled out of view)
        visit = browser.visit(f"{server}/{link}", screenshot=shot, script=RUNS_TABLE, width=3400, ready=RUNS_READY % json.dumps(names))
        artifact = browser.visit(page, screenshot=shot.with_name("mlflow-leaderboard-artifact-kits23.png"), width=1600, ready=IFRAME_READY)
    assert "kits23.html" in artifact.text and "kits23.json" in artifact.text and "leaderboard.json" in artifact.text
    table = json.loads(visit.result)
    assert f"/experiments/{experiment_id}/runs" in table["url"], table["url"]
    results = json.loads((project / "results" / "kits23.json").read_text())
    means = [f"{s}.dice.mean" for s in ("kidney_and_mass", "mass", "tumor")]
    verdicts = [f"{s}.dice.verdict" for s in results["analysis"]["structures"]]
    assert {"Dataset", "Source", *means, *verdicts} <= set(table["header"]), table["header"]
    run_rows = {name: row for row in table["rows"] for name in names if f" {name} " in f" {row} "}
    assert sorted(run_rows) == names, table["rows"]
    for run in runs:  # every headline value of the run, as the table prints it (JavaScript's shortest repr: Python's, 0 for 0.0)
        row = run_rows[run.info.run_name]
        assert "kits23" in row, row
        for mean in means:
            value = run.data.metrics[mean]
            assert f" {str(int(value)) if value.is_integer() else repr(value)} " in f" {row} ", (run.info.run_name, value, row)
            assert len(repr(value).split(".")[-1]) <= 3, (run.info.run_name, mean, value)  # Dice as the site prints it
        if run.info.run_name == tracking.LEADERBOARD_KIND:
            for structure, block in results["analysis"]["structures"].items():
                assert CODE_WORDS[block["metrics"]["dice"]["verdict"]["code"]] == run.data.tags[f"{structure}.dice.verdict"]
            assert {run.data.tags[v] for v in verdicts} <= {word for word in CODE_WORDS.values() if f" {word} " in f" {row} "}, row
    assert [u for u in visit.remote_requests if not u.startswith(server)] == []
    assert shot.stat().st_size > 10_000


# MLflow's experiment list in a browser whose sidebar switch reads "Model training" (stored as the switch stores it),
# then a click on the experiment as a user clicks it; true once that lands on the runs table showing every run (%s)
CLICKED_READY = """((name, names) => {
  if (localStorage.getItem('mlflow.workflowType_v1') !== '"machine_learning"') {
    localStorage.setItem('mlflow.workflowType_v1', '"machine_learning"');
    location.reload();
    return JSON.stringify({ready: false, plots: 0});
  }
  const link = Array.from(document.querySelectorAll('a')).find(a => a.textContent.trim() === name);
  if (!window.segbenchClicked && link) { window.segbenchClicked = true; link.click(); }
  return JSON.stringify({ready: Boolean(window.segbenchClicked) && /\\/experiments\\/\\d+\\/runs/.test(location.hash)
    && names.every(n => document.body.innerText.includes(n)), plots: 0});
})(%s, %s)"""


@pytest.mark.slow
def test_a_clicked_experiment_opens_on_its_runs_table_under_model_training(served: tuple[Path, str], tmp_path: Path) -> None:
    """The README's way in: with MLflow's sidebar switch on "Model training" (3.17 chooses an experiment's first page by
    that switch, not by the experiment's kind tag), a click on the experiment in MLflow's list opens its runs table."""
    project, server = served
    chromium = find_chromium()
    assert chromium, "chromium not found: apt-get install chromium"
    names = sorted(r.info.run_name for r in _runs(project, "kits23"))
    with Browser(chromium, tmp_path / "profile", timeout=180) as browser:
        visit = browser.visit(
            f"{server}/#/experiments",
            screenshot=screenshot_dir(tmp_path) / "mlflow-clicked-kits23.png",
            width=1600,
            ready=CLICKED_READY % (json.dumps(tracking.experiment_name("kits23")), json.dumps(names)),
            script="location.href",
        )
    assert f"/experiments/{_runs(project, 'kits23')[0].info.experiment_id}/runs" in visit.result, visit.result


def _model_run(project: Path, model: str):
    return next(r for r in _runs(project, "kits23") if r.info.run_name == model)


def test_each_run_has_its_dataset_as_an_mlflow_input(small_run: Path, root: Path) -> None:
    """Name, data.dvc md5 as digest, the reference folder as source, one profile row per case."""
    data_md5 = yaml.safe_load((root / "data.dvc").read_text())["outs"][0]["md5"]
    for run in _runs(small_run, "kits23"):
        (dataset_input,) = run.inputs.dataset_inputs
        dataset = dataset_input.dataset
        assert (dataset.name, dataset.digest) == ("kits23", data_md5), run.info.run_name
        assert json.loads(dataset.profile)["num_rows"] == len(CASES)
        assert json.loads(dataset.source)["uri"].endswith("data/kits23/labels")
        assert {t.key: t.value for t in dataset_input.tags} == {"mlflow.data.context": "evaluation"}
    experiment = MlflowClient(tracking_uri(small_run)).get_experiment_by_name("segbench/kits23")
    assert experiment.tags[tracking.EXPERIMENT_KIND_TAG] == "custom_model_development"


def test_runs_carry_source_and_commit_tags_and_results_do_not(small_run: Path) -> None:
    commit = run_command(["git", "rev-parse", "HEAD"], small_run).strip()
    for run in _runs(small_run, "kits23") + _runs(small_run, SMALL_PUBLISHED):
        tags = run.data.tags
        assert tags["mlflow.source.git.commit"] == commit
        assert tags["mlflow.source.type"] == "LOCAL"
        assert tags["mlflow.source.name"] == ("segbench compare" if tags["segbench.kind"] == "leaderboard" else "segbench track")
    for path in [*(small_run / "scores").rglob("*"), *(small_run / "results").glob("*.json")]:
        if path.is_file():
            assert commit not in path.read_text(encoding="utf-8"), path


def test_per_case_table_is_an_mlflow_table_equal_to_the_csv(small_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri(small_run))  # load_table searches the default store
    client = MlflowClient(tracking_uri(small_run))
    for model in MODELS:
        run = _model_run(small_run, model)
        assert {a.path for a in client.list_artifacts(run.info.run_id)} == {
            "per_case.csv",
            "per_case.json",
            "per_case_profiles.csv",
            "per_case_lesions.csv",
            "instances.csv",
            "run.json",
        }
        table = client.load_table(run.info.experiment_id, "per_case.json", run_ids=[run.info.run_id])
        csv = pd.read_csv(small_run / "scores" / "kits23" / model / "per_case.csv", dtype={"case_id": str})
        assert sorted(set(table["case_id"])) == CASES
        pd.testing.assert_frame_equal(table[["case_id", "structure", "dice", "hd95"]], csv[["case_id", "structure", "dice", "hd95"]], check_dtype=False)


def test_model_runs_carry_means_and_counts_only(small_run: Path) -> None:
    """A model run's headline metrics are its plain means (equal to the leaderboard's on these shared cases) and counts;
    CIs and ranks belong to the leaderboard run."""
    results = json.loads((small_run / "results" / "kits23.json").read_text())
    for model in MODELS:
        metrics = _model_run(small_run, model).data.metrics
        assert not [k for k in metrics if "ci_" in k or "rank" in k], metrics
        for structure, block in results["analysis"]["structures"].items():
            assert metrics[f"{structure}.n_cases"] == block["n_cases"] == len(CASES) - block["n_absent"]
            for metric, cell in block["metrics"].items():  # the mean rounded as the site prints a mean without its CI
                shown = format_estimate(cell["models"][model]["mean"], None, None, metric, cell["higher_is_better"]).split()[0]
                assert metrics[f"{structure}.{metric}.mean"] == float(shown), (structure, metric)


def test_leaderboard_run_is_linked_summarised_and_reused(projects: Projects, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = projects.copy(SMALL)  # compare runs again in it
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri(project))  # load_table searches the default store
    client = MlflowClient(tracking_uri(project))
    (board,) = [r for r in _runs(project, "kits23") if r.data.tags["segbench.kind"] == tracking.LEADERBOARD_KIND]
    tags, metrics = board.data.tags, board.data.metrics
    for model in MODELS:
        run_id = _model_run(project, model).info.run_id
        assert tags[f"segbench.run.{model}"] == run_id
        assert f"(#/experiments/{board.info.experiment_id}/runs/{run_id})" in tags["mlflow.note.content"]
    results = json.loads((project / "results" / "kits23.json").read_text())
    analyses = [
        ("", results["analysis"]),
        *((".lesion", results["lesions"][unit]) for unit in ("case", "matched")),
        (".per_lesion", results["lesions"]["lesion"]),
    ]
    cells = [(f"{s}{suffix}.{m}", cell) for suffix, analysis in analyses for s, block in analysis["structures"].items() for m, cell in block["metrics"].items()]
    assert "tumor.lesion.pq_dice" in dict(cells)  # the lesion-wise leaderboards, named as the model runs name their means
    for name, cell in cells:  # few metrics: the #1's mean and the verdict on #1 against #2, per structure and metric
        if not cell.get("ranking"):
            assert not any(k.startswith(f"{name}.") for k in metrics), name
            continue
        first = cell["models"][cell["ranking"]["order"][0]]
        metric = name.rsplit(".", 1)[-1]
        printed = format_estimate(first["mean"], first["ci_low"], first["ci_high"], metric, cell["higher_is_better"])
        assert metrics[f"{name}.mean"] == float(printed.split()[0]), (name, printed)  # as the site prints it
        assert metrics[f"{name}.verdict"] == CODE_NUMBER[cell["verdict"]["code"]]
        assert tags[f"{name}.verdict"] == CODE_WORDS[cell["verdict"]["code"]]  # the same verdict in words
    # and the calibration audit read for each leaderboard (the project holds calibration/results, as every clone does)
    audited = {
        f"{s}.{m}.audited_{key}": entry[key]["rate"]
        for s, by_metric in results["audited"]["structures"].items()
        for m, entry in by_metric.items()
        for key in ("coverage", "type1")
        if entry[key] is not None
    }
    assert audited and {name: metrics.get(name) for name in audited} == audited
    assert set(metrics) <= {f"{name}.{statistic}" for name, _ in cells for statistic in ("mean", "verdict")} | set(audited)
    assert {a.path for a in client.list_artifacts(board.info.run_id)} == {"kits23.html", "kits23.json", "leaderboard.json"}
    table = client.load_table(board.info.experiment_id, "leaderboard.json", run_ids=[board.info.run_id])
    cell = results["analysis"]["structures"]["kidney_and_mass"]["metrics"]["dice"]
    first, second = cell["ranking"]["order"]
    rows = table[(table["structure"] == "kidney_and_mass") & (table["metric"] == "dice")]
    assert rows["model"].tolist() == [first, second]
    # an MLflow table keeps 10 decimals (pandas' JSON); results/<dataset>.json keeps every digit
    bounds = [cell["models"][m][k] for m in (first, second) for k in ("ci_low", "ci_high")]
    assert rows[["ci_low", "ci_high"]].to_numpy().ravel().tolist() == pytest.approx(bounds, abs=1e-10)
    assert rows["p_rank1"].tolist() == pytest.approx([cell["ranking"]["p_rank1"][m] for m in (first, second)], abs=1e-10)
    assert rows[["rank_low", "rank_high"]].values.tolist() == [cell["ranking"]["rank_interval"][m] for m in (first, second)]
    assert len(table) == sum(len(cell["models"]) for _, cell in cells)
    local = Path(client.download_artifacts(board.info.run_id, "kits23.json", str(tmp_path)))
    assert local.read_bytes() == (project / "results" / "kits23.json").read_bytes()
    assert [i.dataset.name for i in board.inputs.dataset_inputs] == ["kits23"]
    before = (project / "results" / "kits23.json").read_bytes()
    with pytest.MonkeyPatch.context() as patch, in_directory(project):
        patch.setenv("SEGBENCH_TRACKING_URI", tracking_uri(project))
        assert main(["compare", "--dataset", "kits23"]) == 0
    assert (project / "results" / "kits23.json").read_bytes() == before
    again = [r.info.run_id for r in _runs(project, "kits23") if r.data.tags["segbench.kind"] == tracking.LEADERBOARD_KIND]
    assert again == [board.info.run_id]


def test_leaderboard_page_is_self_contained(small_run: Path, tmp_path: Path) -> None:
    """The page logged with the leaderboard draws every plot offline, with no other file beside it."""
    chromium = find_chromium()
    assert chromium, "chromium not found: apt-get install chromium"
    client = MlflowClient(tracking_uri(small_run))
    (board,) = [r for r in _runs(small_run, "kits23") if r.data.tags["segbench.kind"] == tracking.LEADERBOARD_KIND]
    page = Path(client.download_artifacts(board.info.run_id, "kits23.html", str(tmp_path)))
    assert sorted(p.name for p in page.parent.iterdir()) == ["kits23.html"]
    with Browser(chromium, tmp_path / "profile", timeout=120) as browser:
        visit = browser.visit(page, screenshot_dir(tmp_path) / "mlflow-leaderboard-kits23.png")
    assert visit.errors == [] and visit.remote_requests == []
    assert visit.plots == page.read_text(encoding="utf-8").count('class="plotly-graph-div"') > 0
    assert "kidney_and_mass" in visit.text and "P(rank 1)" in visit.text
