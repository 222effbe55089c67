"""segbench's analysis of the published segauge-benchmark GPU run reproduces the analysis that file publishes.

The file (data/published/segauge_benchmark/kits23_modal.json) holds per-case Dice, HD95, NSD (2 mm) and
ASSD of TotalSegmentator 2.14.0, CT-FM and MOOSE on KiTS23 case_00000-case_00019, whole kidney, and the
source's own analysis, computed by segauge 0.2.0 from those per-case values (segauge-benchmark's
``ranking.analyze``):

- per model the mean over the 20 cases (``ranking.stats[].score``, also ``summary.<metric>.value``) with a
  95% percentile bootstrap CI (B = 2000, seed 0);
- ranking stability by a paired case bootstrap (the same resampled case indices for every model, B = 2000,
  seed 0): P(best) = the share of resamples in which the model has the best mean, mean rank, rank interval;
- per pair of models the percentile CI of the paired-bootstrap mean difference at the Bonferroni level
  1 - 0.05/3 = 98.3% (3 pairs per metric); "distinguishable" when that CI excludes 0.

segbench runs the whole pipeline on it (import -> MLflow -> compare, its own settings: B = 10,000,
seed 0, Holm) and stores, beside the source's published analysis, its pairwise CIs recomputed under the
source's correction (Bonferroni, alpha = 0.05) from the same per-case values (results: source_analysis).
The two bootstraps draw different resamples (different RNG streams and B), so:

- means are exact (the same 20 numbers averaged): equal to 1e-12;
- the pairwise verdicts under Bonferroni must be identical (they are, on all 12 pairs; none is close
  enough to 0 for the resampling to flip it);
- P(best): both are Monte-Carlo estimates of the same ideal-bootstrap probability, independent given
  the 20 cases. Their difference has SE = sqrt(p (1 - p) (1/2000 + 1/B)) with p the pooled estimate
  (B1 p1 + B2 p2) / (B1 + B2); the tolerance is 4 SE (a false alarm about 6e-5 per model under the
  normal approximation). p = 0 means both are 0.
- CIs (asserted loosely): a percentile endpoint at tail probability q estimated from B resamples has
  MC SE sqrt(q (1 - q) / B) / phi(z_q) x sd_boot (normal approximation of the bootstrap distribution,
  sd_boot = CI width / (2 z_q)); both estimates combined, the tolerance is 4 SE. The largest seen is
  2.4 SE (HD95 MOOSE vs CT-FM, lower end: the most skewed metric).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from scipy.stats import norm

from repo_paths import KITS_META, PUBLISHED
from segbench.cli import main
from segbench.config.validation import compose_params
from segbench.published.segauge import read_segauge_analysis, read_segauge_results
from segbench.stats import StatsSettings, analyze, recompute
from segbench.stats.source import SOURCE_RULE
from tests_support import in_directory

MODAL = PUBLISHED / "segauge_benchmark" / "kits23_modal.json"
NAME = "segauge_kits23_modal"
SOURCE_B = 2000
MC_SES = 4.0


@pytest.fixture(scope="module")
def modal_results(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """results/segauge_kits23_modal.json of import -> track -> compare with segbench's default statistics."""
    project = tmp_path_factory.mktemp("modal")
    raw = compose_params(root / "conf", [f"published=[{NAME}]"])
    for spec in raw["published"].values():
        spec["path"], spec["metadata_file"] = str(root / spec["path"]), str(root / spec["metadata_file"])
    (project / "params.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    (project / "data.dvc").write_text((root / "data.dvc").read_text(), encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch, in_directory(project):
        (project / "mlruns").mkdir()
        patch.setenv("SEGBENCH_TRACKING_URI", f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
        for argv in (["import", "--published", NAME], ["track", "--dataset", NAME], ["compare", "--dataset", NAME]):
            assert main(argv) == 0, argv
    yield json.loads((project / "results" / f"{NAME}.json").read_text())


@pytest.fixture(scope="module")
def source() -> dict:
    return json.loads(MODAL.read_text())


def _ours(results: dict, metric: str) -> dict:
    return results["analysis"]["structures"]["kidney"]["metrics"][metric]


def _oriented(entry: dict, a: str) -> tuple[float, float]:
    """(ci_low, ci_high) of a segbench pairwise entry as 'a minus the other'."""
    sign = 1.0 if entry["a"] == a else -1.0
    low, high = sorted((sign * entry["ci_low"], sign * entry["ci_high"]))
    return low, high


def _endpoint_se(level: float, width: float, b_ours: int) -> float:
    """MC SE of the difference of two percentile-CI endpoints (B = 2000 and b_ours), see the module docstring."""
    q = (1.0 - level) / 2.0
    z = norm.ppf(1.0 - q)
    return math.sqrt(q * (1.0 - q) * (1.0 / SOURCE_B + 1.0 / b_ours)) / norm.pdf(z) * width / (2.0 * z)


def test_means_equal_the_published_means(modal_results: dict, source: dict) -> None:
    for model in source["models"]:
        for metric, summary in model["per_organ"]["kidney"]["summary"].items():
            ours = _ours(modal_results, metric)["models"][model["name"]]
            assert ours["n"] == 20
            assert abs(ours["mean"] - summary["value"]) <= 1e-12, (model["name"], metric)
    for metric, block in source["analysis"]["kidney"].items():
        for stat in block["ranking"]["stats"]:
            assert abs(_ours(modal_results, metric)["models"][stat["name"]]["mean"] - stat["score"]) <= 1e-12, (stat["name"], metric)


def test_pairwise_verdicts_identical_under_bonferroni(modal_results: dict, source: dict) -> None:
    beside = modal_results["source_analysis"]["structures"]["kidney"]
    verdicts = []
    for metric, block in source["analysis"]["kidney"].items():
        ours = beside[metric]["segbench"]
        assert ours["correction"] == "bonferroni" and ours["alpha"] == 0.05
        assert len(ours["pairwise"]) == len(block["pairwise"]) == 3
        for theirs in block["pairwise"]:
            entry = next(e for e in ours["pairwise"] if {e["a"], e["b"]} == {theirs["a"], theirs["b"]})
            assert entry["ci_level"] == pytest.approx(block["adjusted_confidence"], abs=1e-15)
            assert entry["separable"] == theirs["distinguishable"], (metric, theirs["a"], theirs["b"])
            verdicts.append(entry["separable"])
    assert verdicts.count(True) == 2  # NSD MOOSE > CT-FM and ASSD TotalSegmentator < CT-FM, as published


def test_source_analysis_is_what_analyze_gives_under_bonferroni(modal_results: dict) -> None:
    """The stored recomputation equals a fresh ``analyze`` of the file's rows with Bonferroni (same B, seed)."""
    rows = read_segauge_results(MODAL, KITS_META)
    settings = StatsSettings(**{**modal_results["analysis"]["settings"], "multiple_comparison": "bonferroni", **SOURCE_RULE})
    fresh = analyze(rows, metrics={m: v["higher_is_better"] for m, v in modal_results["metrics"].items()}, settings=settings)
    for metric, cell in modal_results["source_analysis"]["structures"]["kidney"].items():
        assert cell["segbench"]["pairwise"] == fresh["structures"]["kidney"]["metrics"][metric]["pairwise"], metric


def test_p_best_within_monte_carlo_error(modal_results: dict, source: dict) -> None:
    b_ours = modal_results["analysis"]["settings"]["n_resamples"]
    for metric, block in source["analysis"]["kidney"].items():
        assert block["ranking"]["n_resamples"] == SOURCE_B
        ranking = _ours(modal_results, metric)["ranking"]
        for stat in block["ranking"]["stats"]:
            theirs, ours = stat["p_best"], ranking["p_rank1"][stat["name"]]
            pooled = (SOURCE_B * theirs + b_ours * ours) / (SOURCE_B + b_ours)
            se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / SOURCE_B + 1.0 / b_ours))
            assert abs(ours - theirs) <= MC_SES * se, (metric, stat["name"], ours, theirs, se)
            assert ranking["rank_interval"][stat["name"]] == [stat["rank_ci_low"], stat["rank_ci_high"]], (metric, stat["name"])


def test_cis_within_monte_carlo_error(modal_results: dict, source: dict) -> None:
    """The source's percentile bootstrap CIs against segbench's under the same rule (its default is skew_t, 5.3)."""
    b_ours = modal_results["analysis"]["settings"]["n_resamples"]
    percentile = recompute(modal_results["analysis"], ci_method="percentile")["structures"]["kidney"]["metrics"]
    for model in source["models"]:
        for metric, summary in model["per_organ"]["kidney"]["summary"].items():
            ours = percentile[metric]["models"][model["name"]]
            se = _endpoint_se(0.95, ours["ci_high"] - ours["ci_low"], b_ours)
            for end in ("ci_low", "ci_high"):
                assert abs(ours[end] - summary[end]) <= MC_SES * se, (model["name"], metric, end)
    for metric, block in source["analysis"]["kidney"].items():
        for theirs in block["pairwise"]:
            entry = next(
                e
                for e in modal_results["source_analysis"]["structures"]["kidney"][metric]["segbench"]["pairwise"]
                if {e["a"], e["b"]} == {theirs["a"], theirs["b"]}
            )
            low, high = _oriented(entry, theirs["a"])
            se = _endpoint_se(entry["ci_level"], high - low, b_ours)
            assert abs(low - theirs["ci_low"]) <= MC_SES * se and abs(high - theirs["ci_high"]) <= MC_SES * se, (metric, theirs)


def test_model_metadata_hd95_and_tolerance_are_the_sources(modal_results: dict) -> None:
    models = modal_results["models"]
    assert {m: (e["licence"], e["versions"]["model_version"], e["trained_on"], e["contaminated"]) for m, e in models.items()} == {
        "TotalSegmentator": ("Apache-2.0", "2.14.0", ["totalsegmentator"], False),
        "CT-FM": ("Apache-2.0", "unknown", ["totalsegmentator"], False),
        "MOOSE": ("CC-BY-4.0", "unknown", [], False),
    }
    assert _ours(modal_results, "dice")["ranking"]["order"] == ["MOOSE", "TotalSegmentator", "CT-FM"]
    assert modal_results["hd95_definition"] == "as published by the source (segauge 0.2.0)"
    assert modal_results["dataset"]["nsd_tolerance_mm"] == {"kidney": 2.0}
    assert modal_results["source_analysis"]["protocol"] == {
        "confidence": 0.95,
        "n_resamples": 2000,
        "seed": 0,
        "nsd_tolerance_mm": 2.0,
        "segauge_version": "0.2.0",
    }


def test_reanalyze_checks_the_source_block(modal_results: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "modal.json"
    path.write_text(json.dumps(modal_results))
    assert main(["reanalyze", str(path)]) == 0
    tampered = copy.deepcopy(modal_results)
    tampered["source_analysis"]["structures"]["kidney"]["dice"]["segbench"]["pairwise"][1]["separable"] = True
    path.write_text(json.dumps(tampered))
    assert main(["reanalyze", str(path)]) == 1
    assert "/source_analysis/structures/kidney/dice/segbench/pairwise[1]/separable" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["analysis"]["kidney"]["dice"]["pairwise"][1].update(distinguishable="no"),
            r"analysis\.kidney\.dice\.pairwise\[1\]\.distinguishable: expected bool, got 'no'",
        ),
        (
            lambda d: d["analysis"]["kidney"]["nsd"]["pairwise"][1].update(favored=None),
            r"analysis\.kidney\.nsd\.pairwise\[1\]\.favored: None does not fit distinguishable=True",
        ),
        (
            lambda d: d["analysis"]["kidney"]["hd95"]["pairwise"][0].update(distinguishable=True, favored="TotalSegmentator"),
            r"analysis\.kidney\.hd95\.pairwise\[0\]\.distinguishable: True but the CI .* includes 0",
        ),
        (lambda d: d["analysis"]["kidney"]["assd"].update(correction="holm"), r"analysis\.kidney\.assd\.correction: 'holm' is not one of"),
        (
            lambda d: d["analysis"]["kidney"]["dice"].update(adjusted_confidence=0.95),
            r"analysis\.kidney\.dice\.adjusted_confidence: 0\.95 is not the bonferroni level",
        ),
        (
            lambda d: d["analysis"]["kidney"]["dice"]["ranking"]["stats"][2].update(p_best=1.5),
            r"analysis\.kidney\.dice\.ranking\.stats\[2\]\.p_best: 1\.5 is not a probability",
        ),
        (
            lambda d: d["analysis"]["kidney"]["dice"]["pairwise"][0].update(b="nnU-Net"),
            r"analysis\.kidney\.dice\.pairwise\[0\]\.b: model 'nnU-Net' is not in the ranking",
        ),
        (lambda d: d["config"].pop("n_resamples"), r"config\.n_resamples: missing"),
    ],
)
def test_malformed_analysis_names_file_and_field(tmp_path: Path, source: dict, edit, message: str) -> None:
    doc = copy.deepcopy(source)
    edit(doc)
    path = tmp_path / "kits23_modal.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"kits23_modal\.json: " + message):
        read_segauge_analysis(path)


def test_malformed_model_metadata_names_file_and_field(tmp_path: Path, source: dict) -> None:
    doc = copy.deepcopy(source)
    doc["models"][2]["contaminated_on"] = "kits23"
    path = tmp_path / "kits23_modal.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"kits23_modal\.json: models\[2\]\.contaminated_on: expected a list"):
        read_segauge_results(path)


def test_suspect_organ_is_left_out(tmp_path: Path, source: dict) -> None:
    """The source leaves an organ whose spot check failed out of its ranking; so does the import."""
    doc = copy.deepcopy(source)
    doc["models"][1]["per_organ"]["kidney"]["suspect"] = True
    path = tmp_path / "kits23_modal.json"
    path.write_text(json.dumps(doc))
    rows = read_segauge_results(path)
    assert sorted(rows["model"].unique()) == ["MOOSE", "TotalSegmentator"]
