"""What every page of the site shares: the frame (head, navigation, shared or inline styles and scripts), the
pages' file names, plots with fixed ids, and the notes every page of a dataset opens with.
"""

from __future__ import annotations

import html
import re
from string import Template

from plotly.offline import get_plotlyjs

from .. import figures
from ..assets import CSS, JS
from ..document import Results
from ..marks import coverage_notes, identical_note, kind
from ..markup import slug

PAGE = Template("""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>$title</title>
$head</head><body>
<nav>$nav</nav>
<main>
$body
</main>
$tail
</body></html>
""")


def dataset_page_name(results: Results) -> str:
    """File name of a dataset's overview page."""
    return f"{slug(results['dataset']['name'])}.html"


def structure_page_name(results: Results, structure: str) -> str:
    """File name of the page with every plot of one structure of a dataset."""
    return f"{slug(results['dataset']['name'])}--{slug(structure)}.html"


CALIBRATION_PAGE = "calibration.html"


METHODOLOGY_DOC = "docs/methodology.md"


def _inline_script(code: str) -> str:
    return "<script>" + code.replace("</script", "<\\/script") + "</script>"


def render(title: str, body: str, nav: str, inline: bool = False) -> str:
    """A whole page; plotly.js is loaded only where there is a plot. ``inline`` puts styles and scripts
    into the page itself (one self-contained file) instead of linking the site's shared files."""
    drawn = 'class="plotly-graph-div"' in body
    if inline:
        head = f"<style>{CSS}</style>\n" + (_inline_script(get_plotlyjs()) + "\n" if drawn else "")
        tail = _inline_script(JS)
    else:
        head = '<link rel="stylesheet" href="site.css">\n' + ('<script src="plotly.min.js"></script>\n' if drawn else "")
        tail = '<script src="site.js"></script>'
    return PAGE.substitute(title=html.escape(title), nav=nav, body=body, head=head, tail=tail)


def nav_bar(all_results: list[Results], current: Results | None = None) -> str:
    """Links to the index, every dataset and the methodology; the current dataset's structures below."""
    links = ['<a href="index.html">segbench</a>']
    links += [f'<a href="{dataset_page_name(r)}">{html.escape(r["dataset"]["name"])}</a>' for r in all_results]
    links.append('<a href="methodology.html">methodology</a>')
    sub = ""
    if current is not None:
        items = [f'<a href="{structure_page_name(current, s)}">{html.escape(s)}</a>' for s in sorted(current["analysis"]["structures"])]
        sub = f'<div class="sub">{html.escape(current["dataset"]["name"])} structures: {" ".join(items)}</div>'
    return " ".join(links) + sub


def plots(figs: list, prefix: str) -> str:
    """Figures with fixed ids; each labelled with its title for screen readers."""
    return "".join(
        f'<figure class="plot" role="img" aria-label="{html.escape(re.sub("<[^>]+>", " ", fig.layout.title.text or ""))}">'
        f"{figures.to_div(fig, f'{prefix}-{i}')}</figure>"
        for i, fig in enumerate(figs)
    )


def notes(results: Results) -> str:
    """Plain statements about simulated, published and contaminated models on this dataset."""
    kinds = {kind(m) for m in results["models"].values()}
    said = []
    if "simulated" in kinds:
        said.append(
            "Models marked SIMULATED are seeded error models applied to the reference label maps, not real "
            "segmentation models; they exercise the pipeline and the statistics."
        )
    if "published" in kinds:
        sources = sorted({m.get("source") or "source not given" for m in results["models"].values() if kind(m) == "published"})
        said.append(
            "Models marked PUBLISHED are per-case scores imported from a publication (no masks were re-scored): " + html.escape("; ".join(sources)) + "."
        )
    if results["dataset"].get("reference") == "PSEUDO-REFERENCE":
        said.append(
            "PSEUDO-REFERENCE: this dataset's references are a model's output ("
            + html.escape(results["dataset"].get("reference_note") or "not a manual annotation")
            + "). Every score here measures agreement with that model, not accuracy."
        )
    if identical := identical_note(results):  # a simulated model that changed nothing there, or a model that returned the reference
        said.append(html.escape(identical))
    said += [html.escape(note) for note in coverage_notes(results)]
    contaminated = sorted(n for n, m in results["models"].items() if m.get("contaminated"))
    if contaminated:
        said.append("Trained on this data, so shown but left out of ranks, tests and winners: " + html.escape(", ".join(contaminated)) + ".")
    return "".join(f'<p class="note">{n}</p>' for n in said)
