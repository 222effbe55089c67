"""The real boards side by side (issue 67), on the real files through the real stages and MLflow: Touchstone's DAP Atlas
results imported by configuration only (conf/published/touchstone_dapatlas.yaml), the repeated cases kept by the set's
duplicate policy and the TCIA metadata joined as Touchstone's notebook joins it, every mean equal to a direct pandas mean
of the published files under that policy; the cross-dataset view of the two Touchstone sets (conf/cross_dataset.yaml);
and how often each board's #1 is real (``segbench show --summary``, the site's index)."""

from __future__ import annotations

import copy
import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from scipy.stats import spearmanr

from projects import working_folder
from segbench.cli import main
from tests_support import in_directory, published_pipeline

SET = "touchstone_dapatlas"
OTHER = "touchstone_totalsegmentator"


@pytest.fixture(scope="module")
def boards_folder(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both Touchstone sets imported, tracked (a fresh MLflow store) and compared once (B = 200) in a working folder on
    the real data, then the cross-dataset stage's command run on their results."""
    folder = working_folder(root, tmp_path_factory.mktemp("realboards"), [f"published=[{OTHER},{SET}]", "stats.n_resamples=200"])
    (folder / "mlruns").mkdir()
    shutil.copy(root / "conf" / "cross_dataset.yaml", folder / "cross_dataset.yaml")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SEGBENCH_TRACKING_URI", f"sqlite:///{folder / 'mlruns' / 'mlflow.db'}")
        for name in (OTHER, SET):
            published_pipeline(folder, name)
        with in_directory(folder):
            assert main(["cross-dataset", "--config", "cross_dataset.yaml", "--out", "crossdataset/real_boards.json"]) == 0
    return folder


@pytest.fixture(scope="module")
def dapatlas_results(boards_folder: Path) -> dict:
    return json.loads((boards_folder / "results" / f"{SET}.json").read_text())


def _published_means(folder: Path, model: str) -> dict[str, pd.Series]:
    """A model's per-organ means straight from its files under the set's policy: the first row of a repeated case
    (duplicates: first), only the cases and cells both metric files report (one_sided_missing: missing)."""
    tables = {
        metric: pd.read_csv(folder / model / name).drop_duplicates("name", keep="first").set_index("name")
        for metric, name in (("dice", "dsc.csv"), ("nsd", "nsd.csv"))
    }
    shared = tables["dice"].index.intersection(tables["nsd"].index)
    dice, nsd = tables["dice"].loc[shared], tables["nsd"].loc[shared]
    both = dice.notna() & nsd.notna()
    return {"dice": dice.where(both).mean(), "nsd": nsd.where(both).mean()}


def test_means_equal_pandas_on_the_published_files_under_the_duplicate_policy(dapatlas_results: dict, root: Path) -> None:
    folder = root / "data" / "published" / SET
    assert len(dapatlas_results["models"]) == 15
    for model in dapatlas_results["models"]:
        expected = _published_means(folder, model)
        for metric, means in expected.items():
            for organ, mean in means.items():
                estimate = dapatlas_results["analysis"]["structures"][organ]["metrics"][metric]["models"][model]
                estimate = estimate["all_reported"] or estimate  # over every case the model reports
                assert estimate["mean"] == pytest.approx(mean, abs=1e-12), (model, organ, metric)
    # the policy matters: STU-Net's last copies would give another liver mean
    last = pd.read_csv(folder / "nnU-Net_STU-Net" / "dsc.csv").drop_duplicates("name", keep="last")["liver"].mean()
    assert last != pytest.approx(_published_means(folder, "nnU-Net_STU-Net")["dice"]["liver"], abs=1e-6)


def test_summary_states_the_repeated_cases_and_the_metadata_join(dapatlas_results: dict) -> None:
    summary = dapatlas_results["dataset"]["import_summary"]
    assert summary["repeated"] == {
        "Vision_Language_U-Net_CLIP/dsc.csv": {"rows": 535, "exact_copies_dropped": 2, "conflicting_copies_resolved": 0, "kept": "one row of each exact copy"},
        "nnU-Net_STU-Net/dsc.csv": {
            "rows": 887,
            "exact_copies_dropped": 0,
            "conflicting_copies_resolved": 354,
            "kept": "of conflicting copies, the first row in the file",
        },
    }
    assert "repeated cases in nnU-Net_STU-Net/dsc.csv (887 rows): 354 conflicting copies resolved" in summary["text"]
    assert summary["policies"] == {"duplicates": "first", "one_sided_missing": "missing"}
    # 18 STU-Net cases have no nsd.csv row: 162 cells with a value, plus U-Net's 34 Dice-only organs
    assert len(summary["one_sided_missing"]["nnU-Net_STU-Net"]) == 162 and len(summary["one_sided_missing"]["nnU-Net_U-Net"]) == 34
    assert summary["cases_without_metadata"] == 0  # every case joins a CT series of the TCIA table, as in the notebook


def test_subgroups_run_on_the_joined_metadata(dapatlas_results: dict) -> None:
    liver = dapatlas_results["analysis"]["structures"]["liver"]["metrics"]["dice"]
    fields = {entry["field"] for entry in liver["subgroups"]} if isinstance(liver["subgroups"], list) else set(liver["subgroups"])
    assert {"sex", "diagnosis", "age_band"} <= fields


def _view(project: Path) -> dict:
    return json.loads((project / "crossdataset" / "real_boards.json").read_text())


def test_cross_dataset_lists_every_shared_model_with_both_ranks_per_organ(boards_folder: Path) -> None:
    view = _view(boards_folder)
    assert [(p["a"], p["b"]) for p in view["pairs"]] == [(SET, OTHER)]
    pair = view["pairs"][0]
    other = json.loads((boards_folder / "results" / f"{OTHER}.json").read_text())
    mine = json.loads((boards_folder / "results" / f"{SET}.json").read_text())
    # 14 models named alike, and STU-Net under the alias conf/cross_dataset.yaml gives it
    shared = {m: m for m in mine["models"] if m in other["models"]} | {"nnU-Net_STU-Net": "nnU-Net_STU-Net_B"}
    assert len(shared) == 15
    for organ in mine["analysis"]["structures"]:
        for metric in ("dice", "nsd"):
            cell = pair["structures"][organ][metric]
            assert {(r["model"], r["model_b"]) for r in cell["models"]} == set(shared.items())
            assert sorted(r["rank_a"] for r in cell["models"]) == sorted(r["rank_b"] for r in cell["models"]) == list(range(1, 16))
            assert cell["ci_low"] <= cell["spearman"] <= cell["ci_high"] and -1 <= cell["ci_low"] and cell["ci_high"] <= 1
            a_cell, b_cell = mine["analysis"]["structures"][organ]["metrics"][metric], other["analysis"]["structures"][organ]["metrics"][metric]
            first = a_cell["ranking"]["order"][0]
            assert cell["first_a"] == first and cell["first_a_among_b_co_winners"] == (shared[first] in b_cell["verdict"]["co_winners"])


def test_one_organs_rank_correlation_equals_scipys_on_the_same_means(boards_folder: Path) -> None:
    cell = _view(boards_folder)["pairs"][0]["structures"]["liver"]["dice"]
    means = {
        name: json.loads((boards_folder / "results" / f"{name}.json").read_text())["analysis"]["structures"]["liver"]["metrics"]["dice"]["models"]
        for name in (SET, OTHER)
    }
    pairs = [(r["model"], r["model_b"]) for r in cell["models"]]
    rho = spearmanr([means[SET][a]["mean"] for a, _ in pairs], [means[OTHER][b]["mean"] for _, b in pairs]).statistic
    assert cell["spearman"] == pytest.approx(rho, abs=1e-12)
    moves = {r["model"]: abs(r["rank_b"] - r["rank_a"]) for r in cell["models"]}
    assert cell["moved_most"] == sorted(m for m, v in moves.items() if v == max(moves.values()))


def test_an_alias_naming_no_model_is_an_error_naming_the_file(boards_folder: Path) -> None:
    bad = boards_folder / "bad_cross.yaml"
    bad.write_text("aliases:\n  touchstone_dapatlas:\n    nnU-Net_STU-Nett: nnU-Net_STU-Net_B\n", encoding="utf-8")
    from segbench.stages.crossdataset import run_cross_dataset

    with pytest.raises(ValueError, match=r"bad_cross.yaml: aliases.touchstone_dapatlas: no model \['nnU-Net_STU-Nett'\]"):
        run_cross_dataset(boards_folder / "results", bad, boards_folder / "out.json")


def _first_rows(project: Path, name: str) -> pd.DataFrame:
    """The board's rows as `segbench show --format tsv` prints them: an independent reading of its verdicts."""
    out = io.StringIO()
    with in_directory(project), pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdout", out)
        assert main(["show", name, "--format", "tsv"]) == 0
    return pd.read_csv(io.StringIO(out.getvalue()), sep="\t")


def test_summary_counts_each_boards_verdicts_with_their_n(boards_folder: Path, capsys: pytest.CaptureFixture) -> None:
    with in_directory(boards_folder):
        assert main(["show", "--summary"]) == 0
    text = capsys.readouterr().out
    for name in (OTHER, SET):
        rows = _first_rows(boards_folder, name)
        cells = rows.groupby(["structure", "metric"])
        n = cells.ngroups
        separable = int((rows[rows["rank"] == 1]["verdict_vs_next"] == "separable").sum())
        median = cells["co_winner"].sum().median()
        doc = json.loads((boards_folder / "results" / f"{name}.json").read_text())
        loo = sum(c["loo"]["winner_change_share"] > 0 for s in doc["analysis"]["structures"].values() for c in s["metrics"].values())
        line = (
            f"  {name}: {len(doc['models'])} models; #1 separable from #2: {separable} of {n} ({separable / n:.0%}); "
            f"median co-winners: {median:g} (n = {n}); #1 changes when one case is removed: {loo} of {n} ({loo / n:.0%})"
        )
        assert line in text.splitlines(), text
    real, simulated = text.split("SIMULATED boards")
    assert SET in real and OTHER in real and "none in this run" in simulated


def test_summary_is_on_the_index_first_screen_with_simulated_boards_apart(boards_folder: Path, tmp_path: Path) -> None:
    from segbench.report.site import build_site

    # a board of simulated models: the DAP Atlas board with every model marked SIMULATED, under another name
    doc = json.loads((boards_folder / "results" / f"{SET}.json").read_text())
    simulated = copy.deepcopy(doc)
    simulated["dataset"]["name"] = "sim_board"
    for model in simulated["models"].values():
        model["kind"], model["simulated"] = "simulated", True
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / f"{SET}.json").write_text(json.dumps(doc))
    (folder / "sim_board.json").write_text(json.dumps(simulated))
    build_site(sorted(folder.glob("*.json")), tmp_path / "site", cross_dataset=boards_folder / "crossdataset" / "real_boards.json")
    index = (tmp_path / "site" / "index.html").read_text()
    summary, leaderboards = index.index("How often is a published #1 real?"), index.index("<h2>Leaderboards</h2>")
    real, apart = index.index("<h3>Real boards</h3>"), index.index("<h3>SIMULATED boards")
    assert summary < real < index.index(f">{SET}</a>", real) < apart < index.index(">sim_board (SIMULATED)</a>", apart) < leaderboards
    assert " of 18 (" in index[real:apart] and "(n = 18)" in index[real:apart]
    page = (tmp_path / "site" / "crossdataset.html").read_text()
    assert "liver dice: Spearman rho" in page and "nnU-Net_STU-Net_B" in page
