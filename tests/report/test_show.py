"""`segbench show`: the leaderboards in a terminal, with the verdicts the statistics wrote, wrapped at spaces only;
and as md, tsv or json for scripts."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from repo_paths import DATA, ROOT
from segbench.stats.verdicts import CODE_WORDS
from site_data import kits_like_results, segauge_results, touchstone_results

TOUCHSTONE = DATA / "published" / "touchstone_totalsegmentator"
ROW_COLUMNS = [
    "dataset",
    "structure",
    "metric",
    "rank",
    "model",
    "mean",
    "ci_low",
    "ci_high",
    "n",
    "coverage",
    "p_rank1",
    "rank_low",
    "rank_high",
    "co_winner",
    "verdict_vs_next",
    "verdict_vs_next_words",
    "verdict_vs_next_text",
]


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not TOUCHSTONE.is_dir():
        pytest.fail("data/ missing: run `dvc pull data.dvc` first (the tests use the real data bundle)")
    folder = tmp_path_factory.mktemp("results")
    touchstone_results(TOUCHSTONE, folder / "touchstone_totalsegmentator.json", ("aorta",))
    return folder


@pytest.fixture(scope="module")
def every_dir(results_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Touchstone, the segauge-benchmark GPU run on 20 KiTS23 cases and a KiTS23-like board with lesion-wise scores."""
    folder = tmp_path_factory.mktemp("every")
    (folder / "touchstone_totalsegmentator.json").write_bytes((results_dir / "touchstone_totalsegmentator.json").read_bytes())
    segauge_results(DATA / "published" / "segauge_benchmark" / "kits23_modal.json", DATA / "kits23" / "kits23.json", folder / "segauge_kits23_modal.json")
    kits_like_results(DATA / "kits23" / "kits23.json", folder / "kits23.json")
    return folder


def _show(*args: str, columns: str | None = None, compact: bool = False) -> subprocess.CompletedProcess:
    """`segbench show` piped, as a script runs it: COLUMNS as given (unset by default). The text overview stacked per cell
    (``--detail``), unless ``compact``: the default one line per cell (test_one_line_per_cell...)."""
    if not compact and "--format" not in args and "--structure" not in args:
        args = (*args, "--detail")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | ({"COLUMNS": columns} if columns else {})
    return subprocess.run([sys.executable, "-m", "segbench.cli", "show", *args], capture_output=True, text=True, timeout=120, env=env)


def _results(folder: Path, name: str) -> dict[str, Any]:
    return json.loads((folder / f"{name}.json").read_text())


def _names(folder: Path) -> set[str]:
    """Every model, structure and metric name of the results in ``folder``."""
    names: set[str] = set()
    for path in folder.glob("*.json"):
        results = json.loads(path.read_text())
        names |= set(results["models"]) | set(results["metrics"]) | set(results["analysis"]["structures"])
    return names


def test_80_columns_split_no_word(every_dir: Path) -> None:
    """At COLUMNS=80 every line fits unless one word is longer, the words are those of the unwrapped output in the same
    order (lines break at spaces only), and no token is a cut-off model, structure or metric name."""
    wide = _show("--results", str(every_dir))
    narrow = _show("--results", str(every_dir), columns="80")
    assert wide.returncode == narrow.returncode == 0, narrow.stderr
    assert max(len(line) for line in wide.stdout.splitlines()) > 200  # piped without COLUMNS: not cut to 80
    assert all(len(line) <= 80 or " " not in line.strip() for line in narrow.stdout.splitlines())
    assert narrow.stdout.split() == wide.stdout.split()
    names = _names(every_dir)
    tokens = [token.strip(",;:()[]'\"") for token in narrow.stdout.split()]
    cut = [(t, u) for t, u in zip(tokens, tokens[1:]) if t not in names and any(name.startswith(t) and (t + u).startswith(name) for name in names)]
    assert not cut, cut  # e.g. 'sim_erod' then 'e_1mm'
    structure = _show("--results", str(every_dir), "kits23", "--structure", "tumor", columns="80")
    assert structure.returncode == 0 and all(len(line) <= 80 for line in structure.stdout.splitlines()), structure.stdout


def test_overview_prints_every_cell_and_its_verdict(results_dir: Path) -> None:
    done = _show("--results", str(results_dir), "--width", "200")
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= 200
    assert "19 models, all PUBLISHED: Touchstone (Bassi et al. 2024)" in done.stdout  # the badge once, not per row
    results = _results(results_dir, "touchstone_totalsegmentator")
    block = results["analysis"]["structures"]["aorta"]
    text = " ".join(done.stdout.split())
    for metric, cell in block["metrics"].items():
        verdict = cell["verdict"]
        assert f"aorta {metric}, {block['n_cases']} cases: #1 {verdict['first']} " in text
        assert f"{CODE_WORDS[verdict['code']]}: {verdict['text']}" in text  # the statistics' sentence verbatim, wrapped only
    assert block["metrics"]["nsd"]["verdict"]["code"] == "aggregation_disagrees"
    changes = results["analysis"]["clusters"]["verdict_changes"]  # a clustered set says its unit first, as the site does
    assert text.index("Unit: the case. The verdicts treat the ") < text.index("aorta dice, ")
    assert (
        f"changes {len(changes['first_second'])} of {changes['n_cells']} #1-versus-#2 verdicts and "
        f"{len(changes['co_winners'])} of {changes['n_cells']} co-winner sets"
    ) in text


def test_structure_leaderboard_and_one_line_errors(results_dir: Path) -> None:
    done = _show("--results", str(results_dir), "--structure", "aorta", "--metric", "dice", "--width", "200")
    assert done.returncode == 0, done.stderr
    cell = _results(results_dir, "touchstone_totalsegmentator")["analysis"]["structures"]["aorta"]["metrics"]["dice"]
    first, second = cell["ranking"]["order"][:2]
    assert "aorta dice (higher is better" in done.stdout and f"1. {first} " in done.stdout and "last ranked" in done.stdout
    pair = next(p for p in cell["verdict"]["pairs"] if p["a"] == first)
    assert f"{CODE_WORDS[pair['code']]}: {pair['text']}" in " ".join(done.stdout.split())
    for args, expected in [
        (("nope",), "have touchstone_totalsegmentator"),
        (("--structure", "kidney"), "have aorta"),
        (("--structure", "aorta", "--metric", "hd"), "have dice, nsd"),
    ]:
        bad = _show("--results", str(results_dir), *args)
        assert bad.returncode == 1 and expected in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


@pytest.mark.parametrize(
    ("args", "needs"),
    [
        (("--metric", "dice"), "--metric needs --structure"),
        (("--format", "json", "--width", "100"), "--width is for --format text"),
        (("--summary", "--format", "tsv"), "--summary is one text table over the boards"),
        (("--cells", "--detail"), "--cells is the text overview's one line per cell"),
    ],
)
def test_an_option_without_the_option_it_needs_is_an_error(results_dir: Path, args: tuple[str, ...], needs: str) -> None:
    """Not silently ignored: exit 2 (a usage error) and a message naming what the option needs."""
    bad = _show("--results", str(results_dir), *args)
    assert bad.returncode == 2 and needs in bad.stderr and bad.stdout == "", bad.stderr


def test_tsv_and_json_one_row_per_dataset_structure_metric_and_model(every_dir: Path) -> None:
    tsv = _show("--results", str(every_dir), "--format", "tsv")
    assert tsv.returncode == 0, tsv.stderr
    table = list(csv.DictReader(io.StringIO(tsv.stdout), delimiter="\t"))
    assert list(table[0]) == ROW_COLUMNS
    records = json.loads(_show("--results", str(every_dir), "--format", "json").stdout)
    assert [list(r) for r in records[:1]] == [ROW_COLUMNS] and len(records) == len(table)
    for name in ("touchstone_totalsegmentator", "segauge_kits23_modal"):
        results = _results(every_dir, name)
        for structure, block in results["analysis"]["structures"].items():
            for metric, cell in block["metrics"].items():
                got = [r for r in records if (r["dataset"], r["structure"], r["metric"]) == (name, structure, metric)]
                assert [r["model"] for r in got][: len(cell["ranking"]["order"])] == cell["ranking"]["order"]
                assert len(got) == len(cell["models"])
                for r in got:
                    assert r["mean"] == cell["models"][r["model"]]["mean"]  # full precision for scripts
                    pair = next((p for p in cell["verdict"]["pairs"] if p["a"] == r["model"]), None)
                    assert (r["verdict_vs_next"], r["verdict_vs_next_words"]) == ((pair["code"], CODE_WORDS[pair["code"]]) if pair else (None, None))
                    assert r["rank"] == cell["ranking"]["rank"].get(r["model"])
    one = json.loads(_show("--results", str(every_dir), "kits23", "--structure", "tumor", "--metric", "dice", "--format", "json").stdout)
    assert {(r["dataset"], r["structure"], r["metric"]) for r in one} == {("kits23", "tumor", "dice")}


def test_markdown_names_each_cell_and_its_verdict(every_dir: Path) -> None:
    done = _show("--results", str(every_dir), "segauge_kits23_modal", "--format", "md")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("## segauge-benchmark GPU run on 20 KiTS23 cases")
    cell = _results(every_dir, "segauge_kits23_modal")["analysis"]["structures"]["kidney"]["metrics"]["nsd"]
    assert f"- **kidney nsd, 20 cases: #1 {cell['verdict']['first']} " in done.stdout
    assert f"  - {CODE_WORDS[cell['verdict']['code']]}: {cell['verdict']['text']}".replace("|", "\\|") in done.stdout.splitlines()


def test_lesion_wise_overview_follows_the_voxel_one(every_dir: Path) -> None:
    """A dataset with lesion-wise scores: a second overview, by case under its lesion profile, with its verdict sentences."""
    results = _results(every_dir, "kits23")
    done = _show("--results", str(every_dir), "kits23")
    assert done.returncode == 0, done.stderr
    voxel, lesion = done.stdout.split("lesion-wise by case (brats matching)")
    cell = results["lesions"]["case"]["structures"]["tumor"]["metrics"]["pq_dice"]
    head = next(line for line in lesion.splitlines() if line.startswith("tumor pq_dice,"))
    assert f"#1 {cell['verdict']['first']} " in head and f"[{cell['models'][cell['verdict']['first']]['ci_low']:.3f}" in head
    assert "pq_dice" not in voxel


def test_kidney_nsd_verdict_agrees_with_its_interval_said_once(every_dir: Path) -> None:
    """segauge's MOOSE/TotalSegmentator kidney NSD cell: the words, then the sentence (no word twice); 'separable' iff the
    printed Δ interval excludes 0; the sentence naming how the Δ intervals were computed printed once for the table."""
    cell = _results(every_dir, "segauge_kits23_modal")["analysis"]["structures"]["kidney"]["metrics"]["nsd"]
    assert {cell["verdict"]["first"], cell["verdict"]["second"]} == {"MOOSE", "TotalSegmentator"}
    text = " ".join(_show("--results", str(every_dir), "segauge_kits23_modal", "--width", "80").stdout.split())
    assert text.count(cell["verdict"]["intervals"]) == 1
    sentence = re.search(r"kidney nsd, 20 cases: .*? co-winners [^✔≈✘⇄]*([✔≈✘⇄] [a-z ]+): (.*?) Δ = ([-.\d]+) \[([-.\d]+), ([-.\d]+)\]", text)
    assert sentence, text
    words, rest, _, low, high = sentence.groups()
    code = next(c for c, w in CODE_WORDS.items() if w == words)
    assert not rest.startswith(words.split(" ", 1)[1]) and code.replace("_", " ") not in rest
    assert (code == "separable") == (float(low) > 0 or float(high) < 0), (words, low, high)


def test_each_verdict_line_states_the_audited_rates(results_dir: Path, tmp_path: Path) -> None:
    """Under each cell's verdict, the audited coverage of its CI and type-I error of its verdict (results' audited block),
    or 'Not audited' and why; a sentence that is the same for every cell (results without audit tables) is said once,
    in the table's notes."""
    done = _show("--results", str(results_dir))
    said = "Not audited: no calibration audit tables when these results were computed."
    assert done.stdout.count(said) == 1 and done.stdout.index(said) < done.stdout.index(" cases: #1 "), done.stdout
    results = _results(results_dir, "touchstone_totalsegmentator")
    entry = {
        "population": "touchstone_totalsegmentator/aorta",
        "source": "touchstone_totalsegmentator",
        "structure": "aorta",
        "match": "exact",
        "candidates": 1,
        "n": 150,
        "n_board": 528,
        "mc_se": 0.006,
    }
    results["audited"] = {
        "margin": 0.015,
        "structures": {
            "aorta": {
                "nsd": {
                    "coverage": entry | {"rate": 0.9316, "method": "skew_t", "target": 0.95, "under_covers": True},
                    "type1": entry | {"rate": 0.016, "procedure": "signflip_holm", "target": 0.05, "exceeds_alpha": False},
                    "reason": None,
                },
                "dice": {"coverage": None, "type1": None, "reason": "no audited population of dice on totalsegmentator"},
            }
        },
    }
    (tmp_path / "touchstone_totalsegmentator.json").write_text(json.dumps(results))
    text = " ".join(_show("--results", str(tmp_path), "--width", "100").stdout.split())
    assert ('Audited: CI covers 93.2% at n = 150 (under-covers); "separable" wrong for equal models 1.6% at n = 150.') in text
    assert "Not audited: no audited population of dice on totalsegmentator." in text


def test_ci_head_follows_the_boards_confidence(results_dir: Path, tmp_path: Path) -> None:
    """'mean [95% CI]' is the level the CIs are computed at, not a constant: a board recomputed at 90% (nominal levels) heads
    both views 'mean [90% CI]'."""
    from segbench.stats.reanalysis import recompute

    shown = _show("--results", str(results_dir)).stdout  # the default board: cells at the audit's levels, 95% and above
    assert re.search(r"mean \[95(\.\d+)?(–\d+(\.\d+)?)?% CI\]", shown), shown
    results = _results(results_dir, "touchstone_totalsegmentator")
    results["analysis"] = recompute(results["analysis"], confidence=0.9, ci_level="nominal")
    (tmp_path / "touchstone_totalsegmentator.json").write_text(json.dumps(results))
    for args in ((), ("--structure", "aorta", "--metric", "dice")):
        out = _show("--results", str(tmp_path), *args).stdout
        assert "mean [90% CI]" in out and "95% CI" not in out, out


def test_models_identical_on_every_case_are_said_so(results_dir: Path, tmp_path: Path) -> None:
    """Where the ranking lists models identical on every case of the cell, the view says so under the cell."""
    results = _results(results_dir, "touchstone_totalsegmentator")
    ranking = results["analysis"]["structures"]["aorta"]["metrics"]["dice"]["ranking"]
    ranking["identical"] = [ranking["order"][1:3]]
    (tmp_path / "touchstone_totalsegmentator.json").write_text(json.dumps(results))
    text = " ".join(_show("--results", str(tmp_path)).stdout.split())
    assert f"{ranking['order'][1]} and {ranking['order'][2]} are identical on every case" in text


def test_p_rank1_of_identical_models_says_it_is_shared(every_dir: Path, results_dir: Path, tmp_path: Path) -> None:
    """Where #1 is identical on every case to #2 (ties share rank 1), the overview's head and the leaderboard say the
    P(rank 1) is shared with the twin, so '1.00' beside 'not separable, Δ = 0.000' does not read as the twin's 0; and
    the table's notes say why its P(rank 1) values add up to more than 1 (models tied in some resamples only get no
    "shared with"), which a table without such ties does not say."""
    from segbench.stats.reanalysis import recompute

    results = _results(every_dir, "kits23")
    cell = results["analysis"]["structures"]["kidney_and_mass"]["metrics"]["dice"]
    first, twin = cell["ranking"]["order"][:2]
    cell["per_case"][twin] = list(cell["per_case"][first])
    results["analysis"] = recompute(results["analysis"])
    assert results["analysis"]["structures"]["kidney_and_mass"]["metrics"]["dice"]["ranking"]["identical"] == [[first, twin]]
    (tmp_path / "kits23.json").write_text(json.dumps(results))
    overview = " ".join(_show("--results", str(tmp_path)).stdout.split())
    assert f"#1 {first} " in overview and f"P(rank 1) 1.00, shared with {twin} (identical on every case); co-winners" in overview
    board = " ".join(_show("--results", str(tmp_path), "kits23", "--structure", "kidney_and_mass", "--metric", "dice").stdout.split())
    assert f"P(rank 1) 1.00, shared with {twin} (identical on every case), ranks" in board
    assert f"P(rank 1) 1.00, shared with {first} (identical on every case), ranks" in board
    assert board.count("shared with") == 2
    tied = "P(rank 1): a tie for first in a resample counts for each tied model, so a cell's P(rank 1) values can add up to more than 1."
    assert tied in board and tied in overview
    assert tied not in " ".join(_show("--results", str(results_dir)).stdout.split())


def test_cases_identical_to_the_reference_are_flagged_on_every_view(results_dir: Path, tmp_path: Path) -> None:
    """A model that left cases identical to the reference is named under every table of `segbench show`, in the
    leaderboard run's MLflow tags, on the dataset's page, and beside its mean in DVC's metrics when it is #1; one
    identical on most of its cases is called out. With none, no view says anything."""
    from segbench.report import standalone_dataset_page
    from segbench.report.summary import IDENTICAL_TAG, summary_tags
    from segbench.stats import leaderboard_heads

    results = _results(results_dir, "touchstone_totalsegmentator")
    first, other = results["analysis"]["structures"]["aorta"]["metrics"]["dice"]["ranking"]["order"][:2]
    counts = results["analysis"]["models"]
    n = counts[first]["identical_to_reference"]["of"]
    counts[first]["identical_to_reference"], counts[other]["identical_to_reference"] = {"cases": n - 2, "of": n}, {"cases": 1, "of": n}
    flag = f"{first} IDENTICAL TO THE REFERENCE on {n - 2} of {n} cases (most: was it given the reference labels?)"
    some = f"{other} leaves 1 of {n} cases identical to the reference"
    (tmp_path / "touchstone_totalsegmentator.json").write_text(json.dumps(results))
    for args in ((), ("touchstone_totalsegmentator", "--structure", "aorta", "--metric", "dice")):
        text = " ".join(_show("--results", str(tmp_path), *args).stdout.split())
        assert flag in text and some in text, text[:2000]
    assert flag in summary_tags(results)[IDENTICAL_TAG] and some in summary_tags(results)[IDENTICAL_TAG]
    assert flag in " ".join(standalone_dataset_page(results).split())
    assert leaderboard_heads(results["analysis"])["aorta", "dice"]["first_identical_to_reference"] == f"{n - 2} of {n} cases"
    counts[first]["identical_to_reference"] = {"cases": n, "of": n}  # every case: "all", not "most"
    assert f"{first} IDENTICAL TO THE REFERENCE on {n} of {n} cases (all: was it given" in summary_tags(results)[IDENTICAL_TAG]
    for model in (first, other):
        counts[model]["identical_to_reference"] = {"cases": 0, "of": n}
    (tmp_path / "touchstone_totalsegmentator.json").write_text(json.dumps(results))
    assert "identical to the reference" not in _show("--results", str(tmp_path)).stdout.lower()
    assert IDENTICAL_TAG not in summary_tags(results) and "first_identical_to_reference" not in leaderboard_heads(results["analysis"])["aorta", "dice"]


def test_one_line_per_cell_fits_80_columns_with_each_cell_s_first_and_verdict(every_dir: Path) -> None:
    """`--cells`: one line per cell at COLUMNS=80, none wider, each cell's #1 and its verdict's words (read from the
    results, as the statistics wrote them) on its line, the audit said once per dataset, not under every cell."""
    done = _show("--results", str(every_dir), "--cells", columns="80", compact=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    detail = _show("--results", str(every_dir), columns="80")
    assert len(lines) * 2 < len(detail.stdout.splitlines())
    for path in sorted(every_dir.glob("*.json")):
        results = json.loads(path.read_text())
        for structure, block in results["analysis"]["structures"].items():
            for metric, cell in block["metrics"].items():
                verdict = cell.get("verdict")
                if not verdict:
                    continue
                words = CODE_WORDS[verdict["code"]] if verdict["pairs"] else CODE_WORDS["single_model"]
                pattern = rf"^\s*{re.escape(structure)} {re.escape(metric)}\s+{re.escape(verdict['first'])}\s.*\s{re.escape(words)}(\s|$)"
                assert any(re.search(pattern, line) for line in lines), (path.name, structure, metric)
    assert sum(line.strip().startswith(("Audited", "Not audited")) for line in lines) <= 2 * len(list(every_dir.glob("*.json")))


def _overview_cells(lines: list[str]) -> set[tuple[str, str, str, str]]:
    """(structure, #1, verdict words, metric) of every cell the default overview's lines name: '  <structure>  <#1>
    <words>: <metric> [⚠] [+N], ...; <words>: ...'."""
    found = set()
    for line in lines:
        row = re.match(r"^  (\S+) +(\S+)  ((?:[✔≈✘⇄] [a-z ]+|only one ranked model|no ranked model): .*)$", line)
        for group in row.group(3).split("; ") if row else []:
            words, _, metrics = group.partition(": ")
            found |= {(row.group(1), row.group(2), words, segment.split()[0]) for segment in metrics.split(", ")}
    return found


def test_the_default_run_fits_one_screen_with_every_cell_s_first_and_verdict() -> None:
    """The default run (results/*.json as `dvc repro` or `dvc checkout` leaves them): at COLUMNS=80 at most 60 lines, none
    wider than 80, every cell (each lesion-wise one too) on a line with its #1 and its verdict's words as the results
    hold them. A clean clone has no results before its `dvc repro`: the suite skips it there, and .ci/run runs it after
    the repro with SEGBENCH_DEFAULT_RUN=required, where their absence fails it."""
    from segbench.report.terminal import lesion_view

    files = sorted((ROOT / "results").glob("*.json"))
    if not files:
        why = "results/ has no results JSON: run `dvc repro` (or `dvc checkout`) first; this test reads the default run's results"
        if os.environ.get("SEGBENCH_DEFAULT_RUN") == "required":
            pytest.fail(why)
        pytest.skip(why)
    done = _show("--results", str(files[0].parent), columns="80", compact=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) <= 60 and max(len(line) for line in lines) <= 80, (len(lines), max(lines, key=len))
    expected = set()
    for path in files:
        results = json.loads(path.read_text())
        for view in [results, *filter(None, [lesion_view(results)])]:
            for structure, block in view["analysis"]["structures"].items():
                for metric, cell in block["metrics"].items():
                    v = cell["verdict"]
                    expected.add((structure, v["first"], CODE_WORDS[v["code"]] if v["pairs"] else CODE_WORDS["single_model"], metric))
    assert len(expected) > 60  # more cells than lines: the grouping, not a smaller run, makes it fit
    assert _overview_cells(lines) == expected


#: a mean beside its CI, as every text view prints it: '0.963 [0.961, 0.965]', '-0.04 [-0.72, 0.16] mm'
MEAN_CI = re.compile(r"(?<![\d.])(-?\d+(?:\.\d+)?) \[(-?\d+(?:\.\d+)?), (-?\d+(?:\.\d+)?)\]")


def _decimals(number: str) -> int:
    return len(number.partition(".")[2])


def test_a_mean_and_its_ci_print_the_same_digits_on_every_view(every_dir: Path) -> None:
    """Wherever a mean sits beside its CI (show's --cells, --detail and --structure, the site's dataset page), the three
    numbers have the same decimals ('0.9708 [0.9701, 0.9713]', never '0.971 [0.9701, 0.9713]')."""
    from segbench.report import standalone_dataset_page

    texts = [
        _show("--results", str(every_dir), *args, compact=True).stdout
        for args in (("--cells",), ("--detail",), ("kits23", "--structure", "tumor"), ("segauge_kits23_modal", "--structure", "kidney"))
    ]
    texts += [standalone_dataset_page(json.loads(path.read_text())) for path in sorted(every_dir.glob("*.json"))]
    found = [match.groups() for text in texts for match in MEAN_CI.finditer(text)]
    assert len(found) > 100
    assert not [triple for triple in found if len({_decimals(n) for n in triple}) != 1], found[:5]
