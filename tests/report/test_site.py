"""The leaderboard site: pages, numbers read from the results JSON, marks, determinism, a real browser.

Results files are made by ``segbench.stats.analyze`` on real rows (Touchstone's published per-case
scores; KiTS-like scores on the real KiTS23 case list), see ``site_data``.
"""

from __future__ import annotations

import copy
import html
import json
import os
import re
from pathlib import Path

import pytest

from browser import Browser, find_chromium
from repo_paths import KITS_META, SEGAUGE_MODAL, TOUCHSTONE
from segbench.base.formats import format_level
from segbench.base.io import write_json_atomic
from segbench.report import build_site
from segbench.stats.reanalysis import recompute
from segbench.stats.verdicts import CODE_WORDS
from site_data import TOUCHSTONE_SOURCE, add_audited, calibration_audit, kits_like_results, segauge_results, touchstone_results


@pytest.fixture(scope="session")
def results_files(audit_file: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The three results files, each with the audited block compare writes from the test audit."""
    if not TOUCHSTONE.is_dir() or not KITS_META.is_file() or not SEGAUGE_MODAL.is_file():
        pytest.fail("data/ missing: run `dvc pull data.dvc` first (the tests use the real data bundle)")
    folder = tmp_path_factory.mktemp("results")
    return [
        add_audited(path, audit_file)
        for path in (
            touchstone_results(TOUCHSTONE, folder / "touchstone_totalsegmentator.json", ("liver", "aorta")),
            kits_like_results(KITS_META, folder / "kits23.json"),
            segauge_results(SEGAUGE_MODAL, KITS_META, folder / "segauge_kits23_modal.json"),
        )
    ]


@pytest.fixture(scope="session")
def audit_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return calibration_audit(tmp_path_factory.mktemp("calibration") / "audit.json", TOUCHSTONE)


@pytest.fixture(scope="session")
def site(results_files: list[Path], audit_file: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("project") / "site"  # the interactive pipeline's site beside it, as in the project
    return out, build_site(results_files, out, calibration=audit_file, interactive_site=out.parent / "interactive" / "site")


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def page_text(page: Path) -> str:
    """The visible text of a page (tags stripped, entities kept), for simple assertions."""
    return re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8"))


def test_pages_and_offline_assets(site: tuple[Path, list[Path]]) -> None:
    out, pages = site
    names = sorted(p.name for p in pages)
    assert names == sorted(
        [
            "index.html",
            "methodology.html",
            "kits23.html",
            "kits23--kidney_and_mass.html",
            "kits23--tumor.html",
            "touchstone_totalsegmentator.html",
            "touchstone_totalsegmentator--liver.html",
            "touchstone_totalsegmentator--aorta.html",
            "segauge_kits23_modal.html",
            "segauge_kits23_modal--kidney.html",
            "calibration.html",
        ]
    )
    assert (out / "plotly.min.js").stat().st_size > 1_000_000
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "cdn." not in text and "https://" not in text.replace("https://plotly.com", "")
        assert text.count("plotly.min.js") == ("plotly-graph-div" in text)


def test_same_json_gives_byte_identical_site(results_files: list[Path], audit_file: Path, site: tuple[Path, list[Path]], tmp_path: Path) -> None:
    out, pages = site
    again = build_site(results_files, tmp_path / "site", calibration=audit_file, interactive_site=tmp_path / "interactive" / "site")
    for a, b in zip(pages, again, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_numbers_come_from_the_results_json(results_files: list[Path], tmp_path: Path) -> None:
    results = load(results_files[1])
    cell = results["analysis"]["structures"]["tumor"]["metrics"]["dice"]
    first = cell["ranking"]["order"][0]
    cell["models"][first].update(mean=0.4321, ci_low=0.4111, ci_high=0.4999)
    results["analysis"]["settings"]["n_resamples"] = 4321
    write_json_atomic(tmp_path / "kits23.json", results)
    build_site([tmp_path / "kits23.json"], tmp_path / "site")
    assert "0.432 [0.411, 0.500]" in page_text(tmp_path / "site" / "kits23--tumor.html")
    assert "0.432 [0.411, 0.500]" in page_text(tmp_path / "site" / "kits23.html")
    assert "B = 4,321 resamples" in page_text(tmp_path / "site" / "methodology.html")


def test_leaderboard_marks_ranks_and_verdicts(site: tuple[Path, list[Path]], results_files: list[Path]) -> None:
    """Marks on the rows when models differ; a mark every model shares said once per table, in its caption."""
    out, _ = site
    kits = page_text(out / "kits23--tumor.html")
    assert "TRAINED ON THIS DATA: unranked" in kits and "unranked: trained on this data" in kits
    assert "SIMULATED" in kits and "PUBLISHED: Example et al. 2025" in kits and "all models" not in kits
    page = (out / "touchstone_totalsegmentator--liver.html").read_text(encoding="utf-8")
    n_tables = page.count('<table class="sortable answers">') + page.count('<table class="sortable leaderboard">')
    assert n_tables == 3  # the answers, one leaderboard per metric
    assert page.count(f"all models PUBLISHED: {TOUCHSTONE_SOURCE}") == n_tables and "tag-published" not in page
    cell = load(results_files[0])["analysis"]["structures"]["liver"]["metrics"]["dice"]
    first, second = cell["ranking"]["order"][:2]
    touchstone = " ".join(html.unescape(page_text(out / "touchstone_totalsegmentator--liver.html")).split())
    sentence = " ".join(cell["verdict"]["pairs"][0]["text"].split())
    assert f"#1 {first} (" in touchstone and f"versus #2 {second} : ✘ not separable : {sentence}" in touchstone  # the words once, then the sentence
    assert re.search(r"mean \[(\d+(\.\d+)?–)?\d+(\.\d+)?% CI\]", touchstone) and "P(rank 1)" in touchstone


# Every row of the page's answers table: its cells' text (without the audited rates, which ``audits`` holds per cell),
# and the verdict's sentence (the disclosure's body and tooltip).
# the rows of the page's first answers table (the lesion-wise section further down has its own)
ANSWERS = """(() => Array.from(document.querySelector('table.answers').querySelectorAll('tbody tr'), r => {
  const d = r.querySelector('details');
  const summary = d && d.querySelector('summary');
  const bare = c => { let s = c.innerText; c.querySelectorAll('.audit').forEach(a => { s = s.replace(a.innerText, ''); }); return s.trim(); };
  return {cells: Array.from(r.cells, bare), audits: Array.from(r.cells, c => Array.from(c.querySelectorAll('.audit'), a => a.innerText)),
          tooltip: summary ? summary.title : null,
          sentence: d ? d.textContent.slice(summary.textContent.length).trim() : null,
          bottom: r.getBoundingClientRect().bottom};
}))()"""


@pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (.ci/run installs it)")
def test_first_screen_answers_every_structure_with_its_verdict(site: tuple[Path, list[Path]], results_files: list[Path], tmp_path: Path) -> None:
    """Each dataset page's first screen (1280 x 800) holds a row per structure and metric: #1, its mean [CI] with units,
    the verdict's words with its sentence (naming the models and the direction) one click away, and the co-winners."""
    out, _ = site
    with Browser(find_chromium(), tmp_path / "profile", timeout=90) as browser:
        rows = {path.stem: browser.visit(out / f"{path.stem}.html", script=ANSWERS).result for path in results_files}
        liver = browser.visit(
            out / "touchstone_totalsegmentator--liver.html",
            script=ANSWERS + ".concat([document.querySelector('table.leaderboard').getBoundingClientRect().top])",
        ).result
    assert [r["cells"][:2] for r in liver[:-1]] == [["liver", "dice"], ["liver", "nsd"]] and liver[-2]["bottom"] <= 800
    assert liver[-1] < 1600  # a structure page: its answers, then the first leaderboard, within two screens
    for name, path in zip(rows, results_files):
        structures = load(path)["analysis"]["structures"]
        assert [(r["cells"][0], r["cells"][1]) for r in rows[name]] == [(s, m) for s in sorted(structures) for m in structures[s]["metrics"]]
        assert max(r["bottom"] for r in rows[name]) <= 800, name
    cells = {(name, r["cells"][0], r["cells"][1]): r for name, found in rows.items() for r in found}

    aorta = cells["touchstone_totalsegmentator", "aorta", "nsd"]  # the mean favours STU-Net_L, 309 of 528 cases STU-Net_B
    assert aorta["cells"][2] == "nnU-Net_STU-Net_L" and aorta["cells"][4] == "⇄ aggregation disagrees"
    assert aorta["sentence"] == aorta["tooltip"] + ". Co-winners: " + aorta["cells"][5].split(": ", 1)[1] + "."
    assert aorta["sentence"].startswith("#1 nnU-Net_STU-Net_L versus #2 nnU-Net_STU-Net_B: the mean favours nnU-Net_STU-Net_L: Δ = 0.002 ")
    assert (
        "per case nnU-Net_STU-Net_B is better (nnU-Net_STU-Net_L better in 201, nnU-Net_STU-Net_B in 309 of 528 cases; "
        "Wilcoxon-Holm: nnU-Net_STU-Net_B better, p_adj = 0.005)"
    ) in aorta["sentence"]

    tumor = cells["kits23", "tumor", "assd"]  # a distance: units on the estimate and the difference
    v = load(results_files[1])["analysis"]["structures"]["tumor"]["metrics"]["assd"]["verdict"]
    assert (v["first"], v["second"]) == ("sim_dilate_1mm", "sim_erode_1mm") and v["code"] in ("separable", "borderline")
    from segbench.stats.verdicts import CODE_WORDS

    assert tumor["cells"][3].endswith(" mm") and tumor["cells"][4] == CODE_WORDS[v["code"]]
    assert tumor["sentence"].startswith("#1 sim_dilate_1mm versus #2 sim_erode_1mm: ") and "Δ = -0." in tumor["sentence"]
    assert " mm (sim_dilate_1mm − sim_erode_1mm); " in tumor["sentence"]  # no per-pair level
    assert "Wilcoxon-Holm: sim_dilate_1mm better, p_adj = " in tumor["sentence"]

    liver = cells["touchstone_totalsegmentator", "liver", "dice"]  # not separable: #2 is a co-winner
    v = load(results_files[0])["analysis"]["structures"]["liver"]["metrics"]["dice"]["verdict"]
    order = load(results_files[0])["analysis"]["structures"]["liver"]["metrics"]["dice"]["ranking"]["order"]
    assert liver["cells"][4] == "✘ not separable" and liver["sentence"].startswith(f"#1 {order[0]} versus #2 {order[1]}: Δ = ")
    assert f"Wilcoxon-Holm leans to {v['pairs'][0]['wilcoxon_leans']}, not significant (p_adj = " in liver["sentence"]
    co = liver["cells"][5].split(": ", 1)[1].split(", ")
    assert co[:2] == order[:2] and co == [m for m in order if m not in v["excluded"]]  # in rank order, the rest excluded
    assert liver["cells"][5] == f"{len(co)}: {', '.join(co)}" and 2 <= len(co) <= len(order)  # a co-winner set of its own (all 19 on this fixture)


P_ADJ = re.compile(r"p_adj")
DIRECTED = re.compile(
    r"(?:[\w.\-]+ better than [\w.\-]+, |[\w.\-]+ better: |Wilcoxon-Holm: [\w.\-]+ better, "
    r"|Wilcoxon-Holm leans to [\w.\-]+, not significant \(|Wilcoxon-Holm leans to neither \()$"
)


def test_every_p_adj_has_its_direction(site: tuple[Path, list[Path]]) -> None:
    """An adjusted p-value says which direction it tests: 'A better than B, p_adj', 'A better: p_adj' or the verdicts'
    'Wilcoxon-Holm: A better, p_adj' / 'Wilcoxon-Holm leans to A, not significant (p_adj'."""
    out, pages = site
    seen = 0
    for page in pages:
        text = html.unescape(re.sub(r"<[^>]+>", "", re.sub(r"<script.*?</script>", "", page.read_text(encoding="utf-8"), flags=re.S)))
        for match in P_ADJ.finditer(text):
            seen += 1
            assert DIRECTED.search(text[max(0, match.start() - 120) : match.start()]), f"{page.name}: {text[match.start() - 120 : match.end() + 10]!r}"
    assert seen > 50


def test_models_without_kind_or_source_still_render(results_files: list[Path], tmp_path: Path) -> None:
    results = load(results_files[0])
    stripped = copy.deepcopy(results)
    for model in stripped["models"].values():
        model.pop("kind"), model.pop("source")
    write_json_atomic(tmp_path / "old.json", stripped)
    pages = build_site([tmp_path / "old.json"], tmp_path / "site")
    assert "PUBLISHED" not in page_text(pages[-1])


def test_cell_without_ranking_renders_every_model_unranked(results_files: list[Path], tmp_path: Path) -> None:
    """All models contaminated (or no shared case): no ranking, tests or leave-one-out in the cell."""
    results = load(results_files[1])
    cell = results["analysis"]["structures"]["tumor"]["metrics"]["dice"]
    cell.update(ranking=None, pairwise=[], significance=None, loo=None, power=None, verdict=None)
    write_json_atomic(tmp_path / "kits23.json", results)
    build_site([tmp_path / "kits23.json"], tmp_path / "site")
    text = page_text(tmp_path / "site" / "kits23--tumor.html")
    assert "Fewer than two ranked models" in text
    contaminated = sum(m["contaminated"] for m in cell["models"].values())
    n_metrics = len(results["analysis"]["structures"]["tumor"]["metrics"])  # one leaderboard each
    assert text.count("unranked: trained on this data") == contaminated * n_metrics
    assert text.count("unranked: no ranking for this metric") == len(cell["models"]) - contaminated


def test_methodology_reads_parameters_licences_and_citations(site: tuple[Path, list[Path]], results_files: list[Path]) -> None:
    out, _ = site
    text = page_text(out / "methodology.html")
    for path in results_files:
        results = load(path)
        assert results["dataset"]["licence"] in text and results["dataset"]["citation"] in text
    assert "B = 200 resamples, seed 0" in text
    assert "kidney_and_mass 1.0331 mm" in text and "segauge_pooled_area_weighted" in text
    assert TOUCHSTONE_SOURCE in text
    assert "docs/methodology.md" in text and "Holm&#x27;s step-down" in text  # the project's methodology, its settings


def test_source_verdicts_and_what_wilcoxon_holm_changes(site: tuple[Path, list[Path]]) -> None:
    """A set whose source published its analysis: every pair where Wilcoxon-Holm and the source's CIs disagree
    is named and explained, on the dataset page and in the structure page's table; other sets show nothing."""
    out, _ = site
    overview = html.unescape(page_text(out / "segauge_kits23_modal.html"))
    assert "The source's verdicts and Wilcoxon-Holm" in overview and 'href="methodology.html#source-procedures"' in (
        out / "segauge_kits23_modal.html"
    ).read_text(encoding="utf-8")
    methodology = page_text(out / "methodology.html")  # the procedures explained once, there
    assert methodology.count("whatever the size of each difference") == 1 and "whatever the size" not in page_text(out / "segauge_kits23_modal--kidney.html")
    assert (
        "Co-winners by the source's CIs: MOOSE, TotalSegmentator, CT-FM; by Wilcoxon-Holm: MOOSE, TotalSegmentator. "
        "Wilcoxon-Holm adds a verdict: MOOSE is significantly better than CT-FM (MOOSE better than CT-FM, p_adj = 0.036), "
        "while the source's bootstrap CI of the difference includes 0."
    ) in overview
    assert ("Wilcoxon-Holm adds a verdict: MOOSE is significantly better than TotalSegmentator (MOOSE better than TotalSegmentator, p_adj = 0.007)") in overview
    assert (
        "Wilcoxon-Holm does not confirm the source's verdict: the CI favours TotalSegmentator, but TotalSegmentator "
        "is not significantly better than CT-FM (TotalSegmentator better than CT-FM, p_adj = 0.110)."
    ) in overview
    assert overview.count("The two procedures agree on every pair.") == 1  # hd95
    page = (out / "segauge_kits23_modal--kidney.html").read_text(encoding="utf-8")
    assert page.count('<table class="sortable source-pairs">') == 4
    assert page.count('class="relation-adds"') == 2 and page.count('class="relation-withholds"') == 1
    assert page.count('class="relation-agree"') == 9
    assert page.count("same verdict as the source") == 12 and "differs from the source" not in page
    assert "source: bootstrap CI (Bonferroni, 98.33%, B = 2,000)" in page and "✔ distinguishable, favours MOOSE" in page
    assert "kidney 2 mm (as published by the source)" in page_text(out / "methodology.html")
    assert "as published by the source (segauge 0.2.0)" in page_text(out / "methodology.html")
    assert "Wilcoxon-Holm versus the source" not in (out / "kits23--tumor.html").read_text(encoding="utf-8")


# Click the 'rank' header of the first table twice; return the rank column after each click.
SORT_BY_RANK = """(() => {
  const table = document.querySelector('table.sortable');
  if (!table) return null;
  const col = Array.from(table.tHead.rows[0].cells).findIndex(th => th.textContent.trim() === 'rank');
  if (col < 0) return null;
  const column = () => Array.from(table.tBodies[0].rows, r => r.cells[col].getAttribute('data-sort'));
  const button = table.tHead.rows[0].cells[col].querySelector('button');
  button.click();
  const ascending = column();
  button.click();
  return [ascending, column()];
})()"""


@pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (.ci/run installs it)")
def test_consensus_schemes_and_case_alignment_are_shown(site: tuple[Path, list[Path]], results_files: list[Path]) -> None:
    """Podium, ranking heatmap, scheme line plot and the protocol notes, their numbers from the results JSON."""
    out, _ = site

    def words(page: str) -> str:
        return " ".join(page_text(out / page).split())

    results = load(results_files[0])
    con = results["analysis"]["consensus"]
    dataset = words("touchstone_totalsegmentator.html")
    first = con["order"][0]
    assert f"#1 {first} , mean rank {con['mean_rank'][first]:.2f}, consensus rank 1 in {con['p_rank1'][first] * 100:.1f}%" in dataset
    assert "Podium: rank per structure and metric" in dataset and "Ranking heatmap: share of" in dataset
    cell = results["analysis"]["structures"]["liver"]["metrics"]["dice"]
    changes = cell["alignment"]["changes"]
    assert "Case alignment" in dataset and "own significance maps use pairwise_complete" in dataset
    liver = words("touchstone_totalsegmentator--liver.html")
    assert f"under pairwise_complete : same co-winners; {len(changes['significant'])} Wilcoxon verdict(s) differ" in liver
    assert "Rank under each ranking scheme" in liver
    kits = words("kits23.html")  # every model scores every case: one protocol, nothing to compare
    assert "Case alignment" not in kits and "Podium" in kits


def test_cluster_versus_case_intervals_are_shown(site: tuple[Path, list[Path]], results_files: list[Path]) -> None:
    """The dataset page's clustered-bootstrap table and width-ratio heatmap, their numbers from the results JSON."""
    out, _ = site
    block = load(results_files[0])["analysis"]["structures"]["liver"]["metrics"]["dice"]["clustered"]
    ratios = sorted(e["width_ratio"] for e in block["models"].values())
    page = (out / "touchstone_totalsegmentator.html").read_text(encoding="utf-8")
    dataset = " ".join(page_text(out / "touchstone_totalsegmentator.html").split())
    assert "Clustered bootstrap" in dataset and "The cases cluster by institute" in dataset
    assert f"liver dice {block['n_clusters']} {ratios[len(ratios) // 2]:.2f} {ratios[0]:.2f} - {ratios[-1]:.2f}" in dataset
    order = load(results_files[0])["analysis"]["structures"]["liver"]["metrics"]["dice"]["ranking"]["order"]
    head = next(p for p in block["pairwise"] if {p["a"], p["b"]} == set(order[:2]))
    words = {True: "separable", False: "not separable"}
    separable = f"{sum(p['case_separable'] for p in block['pairwise'])} / {sum(p['separable'] for p in block['pairwise'])} of {len(block['pairwise'])}"
    assert f"{separable} {words[head['case_separable']]} / {words[head['separable']]} " in dataset  # the #1-versus-#2 pair's
    assert 'id="touchstone_totalsegmentator-clustered-0"' in page
    assert "Clustered bootstrap: 95% CI (skewness-corrected t) width by cluster over width by case" in page
    assert "Clustered bootstrap" not in page_text(out / "kits23.html")  # no cluster field there


def test_first_line_of_a_clustered_set_names_the_unit_and_what_clustering_changes(site: tuple[Path, list[Path]], results_files: list[Path]) -> None:
    """Touchstone clusters by institute: the dataset page opens with the unit its verdicts assume (the case), the population
    that reaches, and how many #1-versus-#2 verdicts and co-winner sets the clustered bootstrap changes, counted here
    again from the clustered blocks; a set without a cluster field says nothing of it."""
    out, _ = site
    analysis = load(results_files[0])["analysis"]
    changed = {"first_second": [], "co_winners": []}
    cells = 0
    for structure, block in sorted(analysis["structures"].items()):
        for metric, cell in sorted(block["metrics"].items()):
            first, second = cell["ranking"]["order"][:2]
            partners = {(p["b"] if p["a"] == first else p["a"]): p for p in cell["clustered"]["pairwise"] if first in (p["a"], p["b"])}
            cells += 1
            if partners[second]["separable"] != partners[second]["case_separable"]:
                changed["first_second"].append(f"{structure} {metric}")
            if {m for m, p in partners.items() if not p["separable"]} != {m for m, p in partners.items() if not p["case_separable"]}:
                changed["co_winners"].append(f"{structure} {metric}")
    assert analysis["clusters"]["verdict_changes"] == {"unit": "case", "n_cells": cells, **changed}
    assert changed["co_winners"]  # B = 200 here: the clustered bootstrap moves co-winners in some cells
    labels = list(analysis["clusters"]["labels"].values())
    largest = max(labels.count(x) for x in set(labels)) / len(labels)
    first = " ".join(page_text(out / "touchstone_totalsegmentator.html").split("segbench leaderboards")[0].split())
    opening = first.split("Unit:", 1)[1].split(" #1 versus #2 per structure")[0]
    assert opening.startswith(
        f" the case. The verdicts treat the {len(labels):,} cases as independent: they speak for cases like these, "
        f"from these {len(set(labels))} institute clusters (the largest holds {100 * largest:.0f}%), not for a "
        "new institute."
    )
    assert (f"changes {len(changed['first_second'])} of {cells} #1-versus-#2 verdicts and {len(changed['co_winners'])} of {cells} co-winner sets") in opening
    page = (out / "touchstone_totalsegmentator.html").read_text(encoding="utf-8")
    assert page.index('id="unit"') < page.index('class="sortable answers"')  # before the answers: the first screen
    assert 'id="unit"' not in (out / "kits23.html").read_text(encoding="utf-8")


def test_levels_print_exact_and_never_as_100_percent(results_files: list[Path], tmp_path: Path) -> None:
    """A cell computed at the audit-calibrated level 99.996% says so, not '100%': every level goes through format_level."""
    results = load(results_files[1])
    cell = results["analysis"]["structures"]["tumor"]["metrics"]["dice"]
    cell["ci_confidence"] = 0.99996
    write_json_atomic(tmp_path / "kits23.json", results)
    build_site([tmp_path / "kits23.json"], tmp_path / "site")
    page = (tmp_path / "site" / "kits23--tumor.html").read_text(encoding="utf-8")
    assert "Mean with 99.996% CI (skewness-corrected t, the audit's level for 95% coverage)" in page
    for shown in (page, (tmp_path / "site" / "methodology.html").read_text(encoding="utf-8")):
        assert not re.search(r"(?<![\d.])100(?:\.0+)?\s?% CI|level 100(?:\.0+)?%", shown)


def test_a_ci_bound_the_range_rule_set_is_marked_with_why(results_files: list[Path], tmp_path: Path) -> None:
    """A model CI whose bound the range rule moved (``ci_bounded``) carries a mark whose tooltip says which bound and why,
    in the answers and the leaderboard; the other CIs carry none."""
    results = load(results_files[1])
    cell = results["analysis"]["structures"]["tumor"]["metrics"]["dice"]
    first = cell["ranking"]["order"][0]
    cell["models"][first]["ci_bounded"] = "high"
    write_json_atomic(tmp_path / "kits23.json", results)
    build_site([tmp_path / "kits23.json"], tmp_path / "site")
    page = (tmp_path / "site" / "kits23--tumor.html").read_text(encoding="utf-8")
    assert (
        page.count(
            '<span class="bounded" title="The range rule set its upper bound: the interval stays within the metric&#x27;s '
            "range and the per-case values it averages"
        )
        == 2
    )  # the answers row and the leaderboard row
    assert page.count('class="bounded"') == 2


def test_distance_plots_spanning_magnitudes_use_a_log_axis_and_ordinal_groups_keep_their_order(results_files: list[Path], tmp_path: Path) -> None:
    """Tumour HD95 with one model far off (a missed lesion: 260 mm) and the others 0.2 mm apart: the means plot draws a log
    axis, which says so, so the close models stay apart; overlap scores stay linear. Age bands read in the order of their
    definition (segbench.base.bands), the statistics' quartile bands of a numeric field in the order of their values."""
    results = load(results_files[1])
    cell = results["analysis"]["structures"]["tumor"]["metrics"]["hd95"]
    far = cell["ranking"]["order"][-1]
    cell["models"][far].update(mean=260.0, ci_low=240.0, ci_high=280.0)
    bands = cell["subgroups"]["age_band"]["groups"]
    assert list(bands) == ["40-49", "50-59", "60-69", "70-79", "80+", "<40"]  # as stored: sorted as text
    dice = results["analysis"]["structures"]["tumor"]["metrics"]["dice"]["subgroups"]
    quartiles = ["27.5-<31", "<24.2", ">=31", "24.2-<27.5"]  # a numeric field's bands as analyze labels them, stored as text sorts
    dice["bmi"] = {**dice["age_band"], "groups": dict(zip(quartiles, dice["age_band"]["groups"].values()))}
    write_json_atomic(tmp_path / "kits23.json", results)
    build_site([tmp_path / "kits23.json"], tmp_path / "site")
    page = (tmp_path / "site" / "kits23--tumor.html").read_text(encoding="utf-8")
    layouts = {
        m.group(1): json.loads(m.group(2)) for m in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*\[.*?\],\s*(\{.*?\}),\s*\{"displayModeBar"', page, re.S)
    }
    assert layouts  # plotly's own calls, parsed as drawn
    hd95, dice = layouts["kits23-tumor-hd95-a-0"], layouts["kits23-tumor-dice-a-0"]
    assert hd95["xaxis"]["type"] == "log" and hd95["xaxis"]["title"]["text"] == "hd95 (log axis)" and "; log axis" in hd95["title"]["text"]
    assert dice["xaxis"].get("type") != "log" and "log axis" not in dice["title"]["text"]

    def ticks(metric: str, field: str) -> list[str]:
        layout = next(v for k, v in layouts.items() if k.startswith(f"kits23-tumor-{metric}-sub-") and f"by {field}" in v["title"]["text"])
        return [t.split("<br>")[0] for t in layout["xaxis"]["ticktext"]]

    assert ticks("hd95", "age_band") == ["&lt;40", "40-49", "50-59", "60-69", "70-79", "80+"]
    assert ticks("dice", "bmi") == ["&lt;24.2", "24.2-&lt;27.5", "27.5-&lt;31", "&gt;=31"]


def test_verdict_intervals_said_once_and_identical_models_named(results_files: list[Path], tmp_path: Path) -> None:
    """The Δ intervals' method and family-wise level (``verdict.intervals``) once per table, not per pair; models the
    ranking finds identical on every case (``ranking.identical``) named in the cell's headline."""
    results = load(results_files[1])
    said = (
        "Δ intervals: the sign-flip and bootstrap-t tests inverted, each at the Holm step level of its pair "
        "(verdicts family-wise at α 0.05; intervals not simultaneous)"
    )
    structures = results["analysis"]["structures"]
    for block in structures.values():
        for cell in block["metrics"].values():
            if cell.get("verdict"):
                cell["verdict"]["intervals"] = said
    dice = structures["kidney_and_mass"]["metrics"]["dice"]
    dice["ranking"]["identical"] = [dice["ranking"]["order"][:2]]
    write_json_atomic(tmp_path / "kits23.json", results)
    build_site([tmp_path / "kits23.json"], tmp_path / "site")
    page = (tmp_path / "site" / "kits23--kidney_and_mass.html").read_text(encoding="utf-8")
    tables = re.findall(r"<table class=\"sortable (answers|leaderboard)\">(.*?)</table>", page, re.S)
    assert len(tables) == 1 + len(structures["kidney_and_mass"]["metrics"])
    assert all(body.count(html.escape(said)) == 1 for _, body in tables)  # once each, in its caption
    a, b = dice["ranking"]["order"][:2]
    headline = page.split('id="dice"', 1)[1].split("</p>", 1)[0]
    assert f"{a} and {b} are identical on every case." in html.unescape(headline)
    assert "identical on every case" not in page.split('id="dice"', 1)[0] + page.split('id="hd95"', 1)[1]


def test_p_rank1_of_identical_models_says_it_is_shared(results_files: list[Path], tmp_path: Path) -> None:
    """Where #1 is identical on every case to #2 (ties share rank 1), the headline and the overview's P(rank 1) say the
    figure is shared with the twin, so '1.00' beside 'not separable, Δ = 0.000' does not read as the twin's 0."""
    results = load(results_files[1])
    cell = results["analysis"]["structures"]["kidney_and_mass"]["metrics"]["dice"]
    first, twin = cell["ranking"]["order"][:2]
    cell["per_case"][twin] = list(cell["per_case"][first])
    results["analysis"] = recompute(results["analysis"])
    ranking = results["analysis"]["structures"]["kidney_and_mass"]["metrics"]["dice"]["ranking"]
    assert ranking["identical"] == [[first, twin]] and ranking["p_rank1"][first] == ranking["p_rank1"][twin] == 1.0
    write_json_atomic(tmp_path / "kits23.json", results)
    build_site([tmp_path / "kits23.json"], tmp_path / "site")
    shared = f"P(rank 1) = 1.00, shared with {twin} (identical on every case)"
    page = html.unescape((tmp_path / "site" / "kits23--kidney_and_mass.html").read_text(encoding="utf-8"))
    assert shared in page.split('id="dice"', 1)[1].split("</p>", 1)[0]
    assert "shared with" not in page.split('id="hd95"', 1)[1]
    overview = page_text(tmp_path / "site" / "kits23.html")
    assert re.search(rf"kidney_and_mass\s+dice\s+{first}\s+1\.00, shared with {twin} \(identical on every case\)", overview)
    # the leaderboard's caption says why its P(rank 1) column adds up to more than 1; a cell without ties does not
    tied = "P(rank 1): a tie for first in a resample counts for each tied model, so a cell's P(rank 1) values can add up to more than 1."
    captions = re.findall(r"<caption>(.*?)</caption>", page, flags=re.S)
    assert any(tied in c and c.startswith("dice ") for c in captions), captions
    assert not any(tied in c for c in captions if c.startswith("nsd "))


@pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (.ci/run installs it)")
def test_kidney_nsd_verdict_agrees_with_the_interval_beside_it(site: tuple[Path, list[Path]], results_files: list[Path], tmp_path: Path) -> None:
    """segauge's 20 KiTS23 cases, kidney NSD, MOOSE versus TotalSegmentator: as a reader sees it in Chromium, the headline
    and the leaderboard row say "separable" iff the Δ interval printed beside it excludes 0, and carry no level of their
    own (the table states it once). Written against the verdict contract: run after the statistics that write it."""
    out, _ = site
    cell = load(results_files[2])["analysis"]["structures"]["kidney"]["metrics"]["nsd"]
    assert set(cell["ranking"]["order"][:2]) == {"MOOSE", "TotalSegmentator"}
    script = """(() => ({headline: document.getElementById('nsd').nextElementSibling.innerText,
      row: Array.from(document.getElementById('nsd').parentNode.querySelectorAll('table.leaderboard'))
        .find(t => t.caption.innerText.startsWith('nsd')).querySelector('tbody tr td:nth-child(7)').textContent}))()"""
    with Browser(find_chromium(), tmp_path / "profile", timeout=90) as browser:
        shown = browser.visit(out / "segauge_kits23_modal--kidney.html", script=script).result
    for text in (shown["headline"], shown["row"]):
        words = next(w for w in CODE_WORDS.values() if w in text)
        low, high = (float(x) for x in re.search(r"Δ = -?[\d.]+ \[(-?[\d.]+), (-?[\d.]+)\]", text).groups())
        assert (words == CODE_WORDS["separable"]) == (low > 0 or high < 0), text
        assert not re.search(r"\d% CI\)", text), text  # no per-pair level


def test_implementation_sensitivity_is_shown_with_its_numbers(site: tuple[Path, list[Path]], results_files: list[Path]) -> None:
    """The dataset page's sensitivity tables: each variant's summary and per-cell flips, read from the results JSON."""
    out, _ = site
    kits = " ".join(page_text(out / "kits23.html").split())
    sens = load(results_files[1])["sensitivity"]
    variant = sens["profiles"]["variants"]["deepmind"]
    s = variant["summary"]
    assert s["n_flipped_pairs"] > 0  # the stretched HD95 reorders some models
    assert "Implementation sensitivity" in kits and "metric-definition profile deepmind instead of segauge" in kits
    assert (
        f"{s['n_cells_with_flips']} of {s['n_cells']} leaderboards change order ({s['n_flipped_pairs']} pairs flip); "
        f"#1 changes in {s['n_top_changed']}, the co-winner set in {s['n_co_winners_changed']}"
    ) in kits
    cell = next(c for by_metric in variant["cells"].values() for c in by_metric.values() if c["ranked"] and c["flipped_pairs"])
    assert "{} / {}".format(*cell["flipped_pairs"][0]) in kits and f"{cell['kendall_tau']:.3f}" in kits
    policy = sens["missing_policy"]["variants"]["zero"]
    assert "missing-value policy zero (failed cases scored 0)" in kits and (policy["run"] or "Not run: no failed case" in kits)
    assert "Implementation sensitivity" not in " ".join(page_text(out / "touchstone_totalsegmentator.html").split())


def test_a_file_that_is_not_the_audit_is_named_and_nothing_is_written(results_files: list[Path], audit_file: Path, tmp_path: Path) -> None:
    """``--calibration`` given a results file by mistake was a bare "error: 'stats'" after the assets were written;
    now the file is named, and a site whose inputs cannot all be drawn writes nothing."""
    truncated = tmp_path / "truncated.json"
    truncated.write_bytes(audit_file.read_bytes()[:200])
    for wrong, why in (
        (results_files[0], "not the calibration audit's audit.json (calibration/results/audit.json): no stats"),
        (truncated, "not a readable calibration audit JSON"),
    ):
        with pytest.raises(ValueError, match="calibration") as error:
            build_site(results_files, tmp_path / "site", calibration=wrong)
        assert str(error.value).startswith(f"{wrong}: {why}")
    assert not (tmp_path / "site").exists()


def test_calibration_page_reads_the_audit(site: tuple[Path, list[Path]], audit_file: Path) -> None:
    """Coverage, type-I errors (with the 5 % + 2 MC SE bound) and one power curve per structure and metric, all from audit.json."""
    out, _ = site
    audit = load(audit_file)
    text = page_text(out / "calibration.html")
    index = (out / "index.html").read_text(encoding="utf-8")
    assert 'href="calibration.html"' in index and 'href="../interactive/site/index.html"' in index
    assert "dvc repro interactive/dvc.yaml" in index
    method = audit["stats"]["ci_method"]  # the leaderboards' CI: skew_t
    cover = [r["rate"] for r in audit["coverage"] if (r["structure"], r["metric"], r["method"]) == ("tumor", "dice", method)]
    wilcoxon = [r["rate"] for r in audit["type1"] if (r["structure"], r["metric"], r["procedure"]) == ("tumor", "dice", "wilcoxon_holm")]
    flips = [r["rate"] for r in audit["type1"] if (r["structure"], r["metric"], r["procedure"]) == ("tumor", "dice", "meantest_holm")]
    levels = [r for r in audit["levels"] if (r["structure"], r["metric"]) == ("tumor", "dice")]
    out_of_sample = sorted(f"{100 * r['rate']:.1f}" for r in levels)
    takeaway = (
        f"tumor dice: 95% {method} CIs cover {100 * min(cover):.1f}–{100 * max(cover):.1f}% at the nominal level (n = 20..40), "
        f"and at the audit-calibrated levels the leaderboards use ("
    )
    verdict = (
        f"{out_of_sample[0]}–{out_of_sample[-1]}% out of sample; the separable verdict "
        f"by sign-flip + bootstrap-t test (Holm) is wrong for equal models {100 * min(flips):.1f}–{100 * max(flips):.1f}% "
        "(target 5%); other rules: bootstrap CI (percentile) separates "
    )
    assert text.index(takeaway) < text.index(verdict) < text.index("Coverage by metric")  # the takeaways lead the page, the board's rule first
    # the calibrated levels' table: every row, simulated and real, with its out-of-sample coverage
    words_levels = " ".join(html.unescape(text).split())
    for r in audit["levels"] + audit["real"]["levels"]:
        name = r["structure"] if r["source"] == "simulated" else f"{r['source']}/{r['structure']}"
        assert f"{name} {r['metric']} {r['n']} {format_level(r['level'])} {100 * r['nominal_rate']:.1f}%" in words_levels, r
    assert f"Wilcoxon-Holm separates {100 * min(wilcoxon):.1f}–{100 * max(wilcoxon):.1f}%" in text
    assert "SIMULATED" in text and "equal_a, equal_b" in text
    first = next(r for r in audit["coverage"] if (r["structure"], r["metric"], r["n"], r["method"]) == ("tumor", "hd95", 20, "bca"))
    assert f"{100 * first['rate']:.1f}% ± {100 * first['mc_se']:.1f}" in text
    for r in audit["type1"]:
        assert f"{100 * r['rate']:.1f}% ± {100 * r['mc_se']:.1f}" in text
    assert text.count("exceeds") + text.count("within") >= len(audit["type1"])
    html_text = (out / "calibration.html").read_text(encoding="utf-8")
    assert html_text.count('class="plotly-graph-div"') == 4  # 2 structures x 2 metrics
    assert "inward_1.5mm" in html_text and "paired-t formula" in html_text
    # the real populations (Touchstone's liver and aorta here): the board's CI and verdict at each n, every row of their tables
    real = audit["real"]
    assert text.index("Real populations") > text.index("Coverage by metric") and "PUBLISHED per-case scores" in text
    words = " ".join(html.unescape(text).split())
    for r in real["coverage"]:
        flag = "⚠ " if r["method"] == method and r["rate"] < 0.95 - 0.015 else ""
        assert f"{flag}{100 * r['rate']:.1f}%" in words and f"{r['structure']} {r['metric']} {r['n']} {r['method']} {_rate(r)}" in words
    for r in real["type1"]:
        assert f"{r['structure']} {r['metric']} {r['n']} {r['procedure'].replace('_', ' ')} {_rate(r)} {r['draws']}" in words
    assert words.count("touchstone_totalsegmentator: the leaderboard's skew_t CI and its separable verdict (meantest holm)") == 1
    assert "aorta dice 528 " in words and "liver nsd 394 " in words


def _rate(r: dict) -> str:
    return f"{100 * r['rate']:.1f}% ± {100 * r['mc_se']:.1f}"


def test_cases_identical_to_the_reference_are_shown(site: tuple[Path, list[Path]], results_files: list[Path], audit_file: Path, tmp_path: Path) -> None:
    """Every model's count of cases left identical to the reference (the analysis' models block) in the Models table; a note
    names the models with any; the calibration page says it per model of its population (audit.json)."""
    out, _ = site
    results = load(results_files[1])
    n_cases = len(results["analysis"]["structures"]["kidney_and_mass"]["case_ids"])
    counts = {m: e["identical_to_reference"] for m, e in results["analysis"]["models"].items()}
    # the seeded KiTS-like rows: one case of sim_dilate_1mm has kidney Dice clipped to 1 and no tumor in the reference
    assert counts == {m: {"cases": int(m == "sim_dilate_1mm"), "of": n_cases} for m in results["models"]}
    text = page_text(out / "kits23.html")
    assert "cases identical to the reference" in text
    assert text.count(f"leaves 0 of {n_cases} cases identical to the reference") == len(counts) - 1
    assert f"Identical to the reference (every structure Dice exactly 1): sim_dilate_1mm leaves 1 of {n_cases} cases" in text
    results["analysis"]["models"]["sim_dilate_1mm"]["identical_to_reference"] = {"cases": 0, "of": n_cases}
    write_json_atomic(tmp_path / "kits23.json", results)
    build_site([tmp_path / "kits23.json"], tmp_path / "site")
    assert "Identical to the reference" not in page_text(tmp_path / "site" / "kits23.html")  # no note when no model has any
    audit = load(audit_file)
    assert audit["identical_to_reference"] == dict.fromkeys(audit["models"], {"cases": 0, "of": 300})
    assert "every model leaves 0 of 300 cases identical to the reference" in page_text(out / "calibration.html")  # all the same: one clause
    audit["identical_to_reference"]["equal_b"] = {"cases": 2, "of": 300}
    write_json_atomic(tmp_path / "audit.json", audit)
    build_site([tmp_path / "kits23.json"], tmp_path / "calibrated", calibration=tmp_path / "audit.json")
    assert "equal_a leaves 0 of 300 cases identical to the reference; equal_b leaves 2 of 300" in page_text(
        tmp_path / "calibrated" / "calibration.html"
    )  # they differ: one clause per model


def test_every_page_renders_in_headless_chromium(site: tuple[Path, list[Path]], tmp_path: Path) -> None:
    """Every plot draws, nothing logs an error, nothing is fetched from the network; screenshots saved."""
    out, pages = site
    shots = Path(os.environ.get("SEGBENCH_SCREENSHOTS", tmp_path / "screens"))
    with Browser(find_chromium(), tmp_path / "profile", timeout=90) as browser:
        for page in pages:
            visit = browser.visit(page, shots / f"{page.stem}.png", SORT_BY_RANK)
            assert visit.errors == [], f"{page.name}: {visit.errors}"
            assert visit.remote_requests == [], f"{page.name}: {visit.remote_requests}"
            assert visit.plots == page.read_text(encoding="utf-8").count('class="plotly-graph-div"')
            assert visit.screenshot is not None and visit.screenshot.stat().st_size > 10_000
            assert visit.plots > 0 or "--" not in page.name
            if visit.result is not None:  # a leaderboard sorted by rank, both ways; unranked rows stay last
                for keys, reverse in zip(visit.result, (False, True)):
                    ranks = [float(k) for k in keys if k]
                    assert ranks == sorted(ranks, reverse=reverse) and keys[len(ranks) :] == [""] * (len(keys) - len(ranks))


@pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (.ci/run installs it)")
def test_browser_check_catches_errors_and_remote_requests(tmp_path: Path) -> None:
    page = tmp_path / "bad.html"
    page.write_text(
        '<html><body><script>console.error("boom"); undefinedFunction();</script><img src="http://192.0.2.1/x.png"></body></html>', encoding="utf-8"
    )
    with Browser(find_chromium(), tmp_path / "profile", timeout=120) as browser:
        visit = browser.visit(page)
    assert any("boom" in e for e in visit.errors) and any("undefinedFunction" in e for e in visit.errors)
    assert visit.remote_requests == ["http://192.0.2.1/x.png"]


def test_lesion_wise_section_reads_the_results(site: tuple[Path, list[Path]], results_files: list[Path]) -> None:
    """The dataset page's lesion-wise section: by case and by lesion (#1, mean [CI], verdict), the clustered intervals,
    the lesion counts and the matching-rule sensitivity, every number from the results JSON's lesions block."""
    out, _ = site
    block = load(results_files[1])["lesions"]
    page = (out / "kits23.html").read_text(encoding="utf-8")
    text = " ".join(page_text(out / "kits23.html").split())
    assert 'id="lesions"' in page and "Lesion-wise" in text and "under the brats lesion profile" in text
    for unit in ("case", "lesion"):
        cell = block[unit]["structures"]["tumor"]["metrics"]["dice" if unit == "lesion" else "pq_dice"]
        first = cell["verdict"]["first"]
        est = cell["models"][first]
        assert f"[{est['ci_low']:.3f}, {est['ci_high']:.3f}]" in text, unit
        assert cell["verdict"]["text"] in html.unescape(page)
    assert 'id="lesions-case-tumor-rq"' in page and 'id="lesions-lesion-cyst-detected"' in page
    counts = block["counts"]["cyst"]["sim_shift_3mm"]
    assert f"cyst sim_shift_3mm {int(counts['n_reference'])} {int(counts['tp'])} {int(counts['fn'])} {int(counts['fp'])}" in text
    found = ", ".join(f"{words} {v['tp']}/{v['n_reference']}" for words, v in zip(("< 1 mL", "1-10 mL", "≥ 10 mL"), counts["by_volume"]))
    assert html.escape(found) in text
    assert "Lesions over every case, under the lesion profile all models SIMULATED" in text  # said once, in the caption
    variant = block["sensitivity"]["variants"]["panoptica"]
    s = variant["summary"]
    assert "matching rule panoptica instead of brats" in text and "Not defined under it: lesion_hd95" in text
    assert f"{s['n_cells_with_flips']} of {s['n_cells']} lesion-wise leaderboards change order" in text
    assert "Lesion-wise" not in page_text(out / "touchstone_totalsegmentator.html")


# Every CI cell of the page's answers and leaderboard tables (the column headed "mean [95% CI]", at its level): where it is (the table's
# kind, the row's structure and metric for answers, the caption's metric and the lesion-wise anchor above for leaderboards)
# and the audited-rate spans it shows, with the verdict's span (answers: its cell; leaderboards: the caption's).
CI_CELLS = """(() => Array.from(document.querySelectorAll('table.answers, table.leaderboard'), t => {
  const headers = Array.from(t.tHead.rows[0].cells, c => c.textContent.trim());
  const col = headers.findIndex(h => h.startsWith('mean [')), verdictCol = headers.indexOf('#1 versus #2');
  const lesions = document.getElementById('lesions');  // the lesion-wise section: every table after its heading
  const spans = e => Array.from(e.querySelectorAll('.audit'), a => ({text: a.textContent, title: a.title, warn: a.classList.contains('warn')}));
  return {kind: t.classList.contains('answers') ? 'answers' : 'leaderboard', caption: t.caption ? t.caption.textContent : '',
          inLesions: !!lesions && !!(lesions.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING),
          captionAudit: t.caption ? spans(t.caption) : [], headers: headers,
          rows: Array.from(t.tBodies[0].rows, r => ({first: r.cells[0].textContent.trim(), second: r.cells[1].textContent.trim(),
                                                      n: r.cells.length, audit: col >= 0 && r.cells[col] ? spans(r.cells[col]) : null,
                                                      verdict: verdictCol >= 0 ? spans(r.cells[verdictCol]) : []}))};
}))()"""


def _expected(entry: dict | None, structure: str, kind: str) -> str:
    """The short text a CI cell (kind 'cov.') or a verdict line (kind 'type-I') must show for an audited entry."""
    if entry is None:
        return "not audited" if kind == "cov." else "type-I not audited"
    flag = entry["under_covers"] if kind == "cov." else entry["exceeds_alpha"]
    where = "" if entry["match"] == "exact" else "†"  # the population is in the tooltip
    at = f" @n={entry['n']}" if kind == "cov." else ""  # a verdict's n is its coverage's, in the tooltip
    return f"{'⚠ ' if flag else ''}{kind} {100 * entry['rate']:.1f}%{at}{where}"


@pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (.ci/run installs it)")
def test_every_ci_cell_shows_its_audited_coverage(site: tuple[Path, list[Path]], results_files: list[Path], audit_file: Path, tmp_path: Path) -> None:
    """Every CI cell on every dataset and structure page shows the audited coverage of its configuration, and every verdict
    line the audited type-I error, with the numbers of the audit's own tables (population, nearest n, rate); the
    lesion-wise ones, which the audit does not cover, say 'not audited'."""
    out, pages = site
    audit = load(audit_file)
    rows_of = {key: audit[key] + audit["real"][key] for key in ("coverage", "type1", "levels")}
    results = {load(p)["dataset"]["name"]: load(p) for p in results_files}
    boards = [p for p in pages if p.stem.split("--")[0] in results]
    seen = {"answers": 0, "leaderboard": 0, "lesion": 0, "audited": 0, "calibrated": 0}
    with Browser(find_chromium(), tmp_path / "profile", timeout=90) as browser:
        found = {page.stem: browser.visit(page, script=CI_CELLS).result for page in boards}
    for stem, page_tables in found.items():
        name, _, structure = stem.partition("--")
        block = results[name]["audited"]
        assert page_tables, stem
        for t in page_tables:
            if t["inLesions"]:  # lesion-wise: every CI cell says it is not audited, and why
                for row in t["rows"]:
                    assert [a["text"] for a in row["audit"]] == ["not audited"] and "lesion-wise" in row["audit"][0]["title"], (stem, row)
                    seen["lesion"] += 1
                continue
            for row in t["rows"]:
                s, metric = (row["first"], row["second"]) if t["kind"] == "answers" else (structure, t["caption"].split(" ", 1)[0])
                entry = block["structures"][s][metric]
                assert [a["text"] for a in row["audit"]] == [_expected(entry["coverage"], s, "cov.")], (stem, s, metric, row)
                if t["kind"] == "answers":
                    assert [a["text"] for a in row["verdict"]] in ([_expected(entry["type1"], s, "type-I")], []), (stem, s, metric)
                seen[t["kind"]] += 1
                if entry["coverage"] is None:
                    continue
                seen["audited"] += 1
                c = entry["coverage"]  # the numbers are the audit's: its row at the population, metric, n and method
                (source_row,) = [
                    r
                    for r in rows_of["levels" if "level" in c else "coverage"]
                    if (r["source"], r["structure"], r["metric"], r["n"], r["method"])
                    == (c["source"], c["structure"], metric, c["n"], results[name]["analysis"]["settings"]["ci_method"])
                ]
                assert (c["rate"], c["mc_se"]) == (source_row["rate"], source_row["mc_se"])
                assert f"{100 * c['rate']:.1f}% ± {100 * c['mc_se']:.1f}" in row["audit"][0]["title"] and c["population"] in row["audit"][0]["title"]
                if "level" in c:  # a CI at the audit-calibrated level: the analysis computed it there, the tooltip names it
                    assert results[name]["analysis"]["structures"][s]["metrics"][metric]["ci_confidence"] == c["level"]
                    words = (
                        f"audit-calibrated level {format_level(c['level'])}"
                        if c["level"] > c["target"]
                        else "at its nominal level, which the audit's calibration kept"
                    )
                    assert words in row["audit"][0]["title"], row["audit"][0]["title"]
                    seen["calibrated"] += 1
                assert row["audit"][0]["warn"] == (c["rate"] < 0.95 - 0.015) == ("under-covers" in row["audit"][0]["title"])
            if t["kind"] == "leaderboard" and len(t["rows"]) > 1 and "verdicts:" in t["caption"]:
                s, metric = structure, t["caption"].split(" ", 1)[0]
                assert [a["text"] for a in t["captionAudit"]] == [_expected(block["structures"][s][metric]["type1"], s, "type-I")]
    assert min(seen.values()) > 0, seen
    # every population kind is on the board: Touchstone's own organs, KiTS23's simulated population, segauge's same-data one
    matches = {
        (n, e["coverage"]["match"])
        for n, r in results.items()
        for by_metric in r["audited"]["structures"].values()
        for e in by_metric.values()
        if e["coverage"]
    }
    assert {("touchstone_totalsegmentator", "exact"), ("kits23", "exact"), ("segauge_kits23_modal", "same_data")} <= matches
    assert any(row["first"] == "tumor" and row["verdict"] for t in found["kits23"] if t["kind"] == "answers" for row in t["rows"])


def test_under_covering_and_unaudited_cells_say_so(results_files: list[Path], tmp_path: Path) -> None:
    """A cell whose configuration under-covers by more than 1.5 points carries ⚠ and says so; results without the audit
    tables (audited: null) say 'not audited' on every CI cell."""
    results = load(results_files[0])
    entry = results["audited"]["structures"]["liver"]["dice"]
    entry["coverage"].update(rate=0.9321, under_covers=True)
    entry["type1"].update(rate=0.0712, exceeds_alpha=True)
    write_json_atomic(tmp_path / "touchstone_totalsegmentator.json", results)
    build_site([tmp_path / "touchstone_totalsegmentator.json"], tmp_path / "site")
    page = (tmp_path / "site" / "touchstone_totalsegmentator--liver.html").read_text(encoding="utf-8")
    n = entry["coverage"]["n"]
    assert page.count(f"⚠ cov. 93.2% @n={n}") == 1 + len(results["analysis"]["structures"]["liver"]["metrics"]["dice"]["models"])
    assert "under-covers by more than 1.5 points" in page and "⚠ type-I 7.1%</span>" in page
    results["audited"] = None
    write_json_atomic(tmp_path / "touchstone_totalsegmentator.json", results)
    build_site([tmp_path / "touchstone_totalsegmentator.json"], tmp_path / "bare")
    text = page_text(tmp_path / "bare" / "touchstone_totalsegmentator--liver.html")
    assert "cov. " not in text and text.count("not audited") >= 2 * len(results["analysis"]["structures"]["liver"]["metrics"]["dice"]["models"])
    assert "no calibration audit tables when these results were computed" in (tmp_path / "bare" / "touchstone_totalsegmentator.html").read_text()


def test_audit_words_follow_the_margin_and_the_audits_settings(
    results_files: list[Path], audit_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The margin, confidence and alpha in the audit's words are the results' and the audit's, never fixed: a board whose
    audited block flags at 2 points says '2 points'; a calibration page at 90% / alpha 0.1 with a 2.5-point margin says so."""
    results = load(results_files[0])
    results["audited"]["margin"] = 0.02
    entry = results["audited"]["structures"]["liver"]["dice"]
    entry["coverage"].update(rate=0.9221, under_covers=True)
    entry["type1"].update(rate=0.0712, exceeds_alpha=True)
    write_json_atomic(tmp_path / "touchstone_totalsegmentator.json", results)
    audit = load(audit_file)
    audit["stats"].update(confidence=0.9, alpha=0.1, power=0.9)
    write_json_atomic(tmp_path / "audit.json", audit)
    monkeypatch.setattr("segbench.report.pages.calibration.MARGIN", 0.025)  # the calibration page flags its rows itself
    build_site([tmp_path / "touchstone_totalsegmentator.json"], tmp_path / "site", calibration=tmp_path / "audit.json")
    board = (tmp_path / "site" / "touchstone_totalsegmentator--liver.html").read_text(encoding="utf-8")
    overview = (tmp_path / "site" / "touchstone_totalsegmentator.html").read_text(encoding="utf-8")
    assert "under-covers by more than 2 points" in board and "above alpha by more than 2 points" in board
    assert "⚠ more than 2 points worse than the target" in overview and "1.5 points" not in board + overview
    text = " ".join(page_text(tmp_path / "site" / "calibration.html").split())
    assert "⚠: the out-of-sample coverage is more than 2.5 points below 90%." in text
    assert "⚠: more than 2.5 points below 90% coverage, or above 10% type-I error." in text
    assert "1.5 points" not in text
    words = " ".join(html.unescape(text).split())
    for r in audit["real"]["coverage"]:  # the flags follow the same margin as the words
        if r["method"] == audit["stats"]["ci_method"]:
            assert f"{'⚠ ' if r['rate'] < 0.9 - 0.025 else ''}{100 * r['rate']:.1f}%" in words
    plots = (tmp_path / "site" / "calibration.html").read_text(encoding="utf-8")
    assert '"y0":0.9,"y1":0.9' in plots and '"y0":0.8,' not in plots  # the target power line is the audit's


def test_ci_heads_and_plot_titles_name_the_boards_ci(site: tuple[Path, list[Path]], results_files: list[Path], tmp_path: Path) -> None:
    """The CI column's head follows the board's confidence, and each means plot names its CI: the method and, for a cell
    computed at an audit-calibrated level, that level (a plot saying 'bootstrap CI' over skew_t CIs contradicted the
    cells above it)."""
    out, _ = site
    results = load(results_files[1])
    assert results["analysis"]["settings"]["ci_method"] == "skew_t"
    page = (out / "kits23--tumor.html").read_text(encoding="utf-8")
    levels = {metric: cell["ci_confidence"] for metric, cell in results["analysis"]["structures"]["tumor"]["metrics"].items()}
    assert any(level > 0.95 for level in levels.values()), levels
    for level in levels.values():  # each leaderboard and plot at the level its CIs are computed at
        at = f"{format_level(level)} CI (skewness-corrected t, the audit's level for 95% coverage)" if level > 0.95 else "95% CI (skewness-corrected t)"
        assert f"Mean with {at}; shaded: the CI of #1" in page
        assert f'<button type="button">mean [{format_level(level)} CI]</button>' in page
    low, high = format_level(min(levels.values())), format_level(max(levels.values()))
    assert f'<button type="button">mean [{low[:-1]}–{high} CI]</button>' in page  # the answers table: every cell's level
    assert "bootstrap CI" not in page

    board = {"confidence": 0.9, "ci_method": "percentile", "ci_level": "nominal"}  # a 90% board by the percentile bootstrap
    results["analysis"] = recompute(results["analysis"], **board)
    results["lesions"]["case"] = recompute(results["lesions"]["case"], **board)
    results["audited"] = None
    write_json_atomic(tmp_path / "kits23.json", results)
    build_site([tmp_path / "kits23.json"], tmp_path / "site")
    page = (tmp_path / "site" / "kits23--tumor.html").read_text(encoding="utf-8")
    assert '<button type="button">mean [90% CI]</button>' in page and "Mean with 90% CI (percentile bootstrap); shaded: the CI of #1" in page
    # no head or plot at 95% (the verdicts' CIs of a difference stay at their Holm step's level, from alpha)
    assert not re.search(r"(?i)mean with 95%|mean \[95% CI\]", page) and "the audit's level for" not in page
    methodology = page_text(tmp_path / "site" / "methodology.html")
    assert "90% CI of the mean: percentile bootstrap;" in methodology and "audit" not in methodology.split("90% CI of the mean")[1][:200]


def test_names_are_plain_text_and_names_slugging_alike_get_their_own_pages(results_files: list[Path], tmp_path: Path) -> None:
    """A model named `<a href="https://…">` was a live link in Plotly's charts; structures `liver!` and `liver?` slugged to one
    page and one silently replaced the other."""
    text = results_files[0].read_text(encoding="utf-8")
    model = sorted(load(results_files[0])["models"])[0]
    hostile = '<a href="https://example.org/x">click</a>'
    text = text.replace(json.dumps(model)[1:-1], json.dumps(hostile)[1:-1])
    text = text.replace('"liver"', '"liver!"').replace('"aorta"', '"liver?"')
    (tmp_path / "hostile.json").write_text(text, encoding="utf-8")
    pages = build_site([tmp_path / "hostile.json"], tmp_path / "site")
    structure_pages = sorted(p.name for p in pages if "--liver" in p.name)
    assert len(structure_pages) == 2 and structure_pages[0] != structure_pages[1], structure_pages
    for page in pages:
        body = page.read_text(encoding="utf-8")
        assert '<a href="https://example.org' not in body, page  # neither in the HTML nor, unescaped, in a chart's data
        assert "\\u003ca href" not in body, f"{page}: a chart draws the name as a link"
    charts = " ".join(p.read_text(encoding="utf-8") for p in pages)
    assert '"&lt;a href=\\"https:\\u002f\\u002fexample.org\\u002fx\\"&gt;click' in charts  # in the charts' data, as entities plotly shows as typed
