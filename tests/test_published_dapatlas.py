"""Touchstone's DAP Atlas results imported by configuration only (conf/published/touchstone_dapatlas.yaml): the
repeated cases kept by the set's duplicate policy, the TCIA metadata joined as Touchstone's notebook joins it, and
every mean equal to a direct pandas mean of the published files under that policy (real files, real MLflow)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from projects import working_folder
from segbench.cli import main
from tests_support import in_directory

SET = "touchstone_dapatlas"


@pytest.fixture(scope="module")
def results(root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The set imported, tracked (a fresh MLflow store) and compared once (B = 200) in a working folder on the real data."""
    project = working_folder(root, tmp_path_factory.mktemp("dapatlas"), [f"published=[{SET}]", "stats.n_resamples=200"])
    (project / "mlruns").mkdir()
    with pytest.MonkeyPatch.context() as patch, in_directory(project):
        patch.setenv("SEGBENCH_TRACKING_URI", f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
        for argv in (["import", "--published", SET], ["track", "--dataset", SET], ["compare", "--dataset", SET]):
            assert main(argv) == 0, argv
    return json.loads((project / "results" / f"{SET}.json").read_text())


def _published_means(folder: Path, model: str) -> dict[str, pd.Series]:
    """A model's per-organ means straight from its files under the set's policy: the first row of a repeated case
    (duplicates: first), only the cases and cells both metric files report (one_sided_missing: missing)."""
    tables = {metric: pd.read_csv(folder / model / name).drop_duplicates("name", keep="first").set_index("name")
              for metric, name in (("dice", "dsc.csv"), ("nsd", "nsd.csv"))}
    shared = tables["dice"].index.intersection(tables["nsd"].index)
    dice, nsd = tables["dice"].loc[shared], tables["nsd"].loc[shared]
    both = dice.notna() & nsd.notna()
    return {"dice": dice.where(both).mean(), "nsd": nsd.where(both).mean()}


def test_means_equal_pandas_on_the_published_files_under_the_duplicate_policy(results: dict, root: Path) -> None:
    folder = root / "data" / "published" / SET
    assert len(results["models"]) == 15
    for model in results["models"]:
        expected = _published_means(folder, model)
        for metric, means in expected.items():
            for organ, mean in means.items():
                estimate = results["analysis"]["structures"][organ]["metrics"][metric]["models"][model]
                estimate = estimate["all_reported"] or estimate  # over every case the model reports
                assert estimate["mean"] == pytest.approx(mean, abs=1e-12), (model, organ, metric)
    # the policy matters: STU-Net's last copies would give another liver mean
    last = pd.read_csv(folder / "nnU-Net_STU-Net" / "dsc.csv").drop_duplicates("name", keep="last")["liver"].mean()
    assert last != pytest.approx(_published_means(folder, "nnU-Net_STU-Net")["dice"]["liver"], abs=1e-6)


def test_summary_states_the_repeated_cases_and_the_metadata_join(results: dict) -> None:
    summary = results["dataset"]["import_summary"]
    assert summary["repeated"] == {
        "Vision_Language_U-Net_CLIP/dsc.csv": {"rows": 535, "exact_copies_dropped": 2, "conflicting_copies_resolved": 0,
                                               "kept": "one row of each exact copy"},
        "nnU-Net_STU-Net/dsc.csv": {"rows": 887, "exact_copies_dropped": 0, "conflicting_copies_resolved": 354,
                                    "kept": "of conflicting copies, the first row in the file"}}
    assert "repeated cases in nnU-Net_STU-Net/dsc.csv (887 rows): 354 conflicting copies resolved" in summary["text"]
    assert summary["policies"] == {"duplicates": "first", "one_sided_missing": "missing"}
    # 18 STU-Net cases have no nsd.csv row: 162 cells with a value, plus U-Net's 34 Dice-only organs
    assert len(summary["one_sided_missing"]["nnU-Net_STU-Net"]) == 162 and len(summary["one_sided_missing"]["nnU-Net_U-Net"]) == 34
    assert summary["cases_without_metadata"] == 0  # every case joins a CT series of the TCIA table, as in the notebook


def test_subgroups_run_on_the_joined_metadata(results: dict) -> None:
    liver = results["analysis"]["structures"]["liver"]["metrics"]["dice"]
    fields = {entry["field"] for entry in liver["subgroups"]} if isinstance(liver["subgroups"], list) else set(liver["subgroups"])
    assert {"sex", "diagnosis", "age_band"} <= fields
