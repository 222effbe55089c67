"""Where things are, computed once from this file: the repository, its data bundle and the tests' own files.

A test takes its paths from here, never from its own location, so that a test file can move between the folders of
tests/ (grouped by the package's layers) and still point at the same places.
"""

from __future__ import annotations

from pathlib import Path

#: the repository's root (this file is tests/support/repo_paths.py)
ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
DOCS = ROOT / "docs"

#: the real data bundle (`dvc pull data.dvc`)
DATA = ROOT / "data"
KITS_LABELS = DATA / "kits23" / "labels"
KITS_META = DATA / "kits23" / "kits23.json"
PUBLISHED = DATA / "published"
TOUCHSTONE = PUBLISHED / "touchstone_totalsegmentator"
SEGAUGE_KITS = PUBLISHED / "segauge_benchmark" / "kits23_seed.json"
SEGAUGE_MODAL = PUBLISHED / "segauge_benchmark" / "kits23_modal.json"
#: the real CT and MR with TotalSegmentator's outputs on them, and the CT's 20-slice DICOM series
TOTALSEG_EXAMPLE = DATA / "totalseg_example"

#: what the tests share beside their helper modules (tests/support/)
SUPPORT = Path(__file__).resolve().parent
#: the model executables' stand-ins and the stand-in packages (torch, monai, ...) of the interactive adapters
STANDINS = SUPPORT / "standins"
#: the published class lists the adapters' expectations are written from
CLASS_LISTS_JSON = SUPPORT / "fixtures" / "published_class_lists.json"
#: holds the sitecustomize.py that stops a command's Python process at a moment the test chooses (``gate_env``)
GATE = SUPPORT / "gate"
