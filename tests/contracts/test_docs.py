"""Citations of the project's documents (docs/*.md#section) point at sections that exist."""

from __future__ import annotations

import re
from pathlib import Path

from repo_paths import ROOT

CITING = ["README.md", "dvc.yaml", "docs", "src", "tests", "conf"]
CITATION = re.compile(r"(?:docs/|\]\()((?:[\w-]+)\.md)#([\w-]+)")


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown text: lower case, punctuation dropped, spaces -> '-'."""
    anchors: set[str] = set()
    counts: dict[str, int] = {}
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        anchors.add(slug if slug not in counts else f"{slug}-{counts[slug]}")
        counts[slug] = counts.get(slug, 0) + 1
    return anchors


def citing_files() -> list[Path]:
    files = []
    for name in CITING:
        path = ROOT / name
        files += [path] if path.is_file() else [p for p in sorted(path.rglob("*")) if p.suffix in {".py", ".md", ".yaml"}]
    return files


def test_github_anchors_of_numbered_headings() -> None:
    text = "# Title\n## 3. Metric conventions\n### 5.10 Contamination\n```\n## not a heading\n```\n## Agreement (engine - segauge)\n"
    assert github_anchors(text) == {"title", "3-metric-conventions", "510-contamination", "agreement-engine---segauge"}


def test_every_cited_section_exists() -> None:
    docs = {p.name: github_anchors(p.read_text(encoding="utf-8")) for p in (ROOT / "docs").glob("*.md")}
    citations, broken = 0, []
    for path in citing_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for document, anchor in CITATION.findall(line):
                if document not in docs:
                    continue
                citations += 1
                if anchor not in docs[document]:
                    broken.append(f"{path.relative_to(ROOT)}:{number}: {document}#{anchor}")
    assert citations >= 20  # the code, config and README cite the methodology throughout: the pattern finds them
    assert broken == []
