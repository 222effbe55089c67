"""`segbench show`: the leaderboards in a terminal, with the verdicts the statistics wrote, in 200 columns."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from site_data import touchstone_results

TOUCHSTONE = Path(__file__).resolve().parents[1] / "data" / "published" / "touchstone_totalsegmentator"


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not TOUCHSTONE.is_dir():
        pytest.fail("data/ missing: run `dvc pull data.dvc` first (the tests use the real data bundle)")
    folder = tmp_path_factory.mktemp("results")
    touchstone_results(TOUCHSTONE, folder / "touchstone_totalsegmentator.json", ("aorta",))
    return folder


def _show(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "segbench.cli", "show", "--width", "200", *args], capture_output=True, text=True, timeout=120)


def test_overview_prints_every_cell_and_its_verdict_in_200_columns(results_dir: Path) -> None:
    done = _show("--results", str(results_dir))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 200
    assert "19 models, all PUBLISHED: Touchstone (Bassi et al. 2024)" in done.stdout  # the badge once, not per row
    cell = json.loads((results_dir / "touchstone_totalsegmentator.json").read_text())["analysis"]["structures"]["aorta"]["metrics"]["nsd"]
    verdict = cell["verdict"]
    assert verdict["code"] == "aggregation_disagrees"
    row = next(line for line in lines if line.lstrip().startswith("aorta") and " nsd " in line)
    assert "aggregation disagrees" in row and verdict["first"] in row
    text = " ".join(line.strip() for line in lines)
    assert f"aorta nsd: {verdict['text']}" in text  # the statistics' sentence verbatim, wrapped only


def test_structure_leaderboard_and_one_line_errors(results_dir: Path) -> None:
    done = _show("--results", str(results_dir), "--structure", "aorta", "--metric", "dice")
    assert done.returncode == 0, done.stderr
    assert "aorta dice (higher is better" in done.stdout and "versus next model" in done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) <= 200
    for args, expected in [(("nope",), "have touchstone_totalsegmentator"), (("--structure", "kidney"), "have aorta"),
                           (("--structure", "aorta", "--metric", "hd"), "have dice, nsd")]:
        bad = _show("--results", str(results_dir), *args)
        assert bad.returncode != 0 and expected in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_lesion_wise_overview_follows_the_voxel_one(tmp_path: Path) -> None:
    """A dataset with lesion-wise scores: a second overview, by case under its lesion profile, with its verdict sentences."""
    from site_data import kits_like_results

    results = json.loads(kits_like_results(TOUCHSTONE.parents[1] / "kits23" / "kits23.json", tmp_path / "kits23.json").read_text())
    done = _show("--results", str(tmp_path))
    assert done.returncode == 0, done.stderr
    voxel, lesion = done.stdout.split("lesion-wise by case (brats matching)")
    cell = results["lesions"]["case"]["structures"]["tumor"]["metrics"]["pq_dice"]
    row = next(line for line in lesion.splitlines() if line.lstrip().startswith("tumor") and " pq_dice " in line)
    assert cell["verdict"]["first"] in row and f"[{cell['models'][cell['verdict']['first']]['ci_low']:.3f}" in row
    assert "pq_dice" not in voxel


def test_each_verdict_line_states_the_audited_rates(results_dir: Path, tmp_path: Path) -> None:
    """One line a leaderboard: the verdict sentence, then the audited coverage of its CI and type-I error of its verdict
    (results' audited block), or 'Not audited' and why."""
    done = _show("--results", str(results_dir))
    assert "Not audited: no calibration audit tables when these results were computed." in " ".join(done.stdout.split())
    results = json.loads((results_dir / "touchstone_totalsegmentator.json").read_text())
    entry = {"population": "touchstone_totalsegmentator/aorta", "source": "touchstone_totalsegmentator", "structure": "aorta", "match": "exact",
             "candidates": 1, "n": 150, "n_board": 528, "mc_se": 0.006}
    results["audited"] = {"margin": 0.015, "structures": {"aorta": {
        "nsd": {"coverage": entry | {"rate": 0.9316, "method": "skew_t", "target": 0.95, "under_covers": True},
                "type1": entry | {"rate": 0.016, "procedure": "signflip_holm", "target": 0.05, "exceeds_alpha": False}, "reason": None},
        "dice": {"coverage": None, "type1": None, "reason": "no audited population of dice on totalsegmentator"}}}}
    (tmp_path / "touchstone_totalsegmentator.json").write_text(json.dumps(results))
    text = " ".join(_show("--results", str(tmp_path)).stdout.split())
    assert ('Audited: CI covers 93.2% at n = 150 (under-covers); "separable" wrong for equal models 1.6% at n = 150.') in text
    assert "Not audited: no audited population of dice on totalsegmentator." in text


def test_ci_column_head_follows_the_boards_confidence(results_dir: Path, tmp_path: Path) -> None:
    """'mean [95% CI]' is the board's confidence, not a constant: a board recomputed at 90% heads both tables 'mean [90% CI]'."""
    from segbench.stats.analysis import recompute

    assert "mean [95% CI]" in _show("--results", str(results_dir)).stdout
    results = json.loads((results_dir / "touchstone_totalsegmentator.json").read_text())
    results["analysis"] = recompute(results["analysis"], confidence=0.9, ci_level="nominal")
    (tmp_path / "touchstone_totalsegmentator.json").write_text(json.dumps(results))
    for args in ((), ("--structure", "aorta", "--metric", "dice")):
        out = _show("--results", str(tmp_path), *args).stdout
        assert "mean [90% CI]" in out and "95% CI" not in out, out
