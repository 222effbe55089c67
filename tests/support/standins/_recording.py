"""Shared by the stand-ins: where the recorded native output for a case is, and a call log.

The test sets SEGBENCH_STANDIN_RECORDINGS to a folder holding ``<case>.nii.gz`` native outputs (the
real recorded TotalSegmentator output, or a file in the model's documented label ids) and
SEGBENCH_STANDIN_LOG to a file where every call appends its argv.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path


def log_call(tool: str) -> None:
    with open(os.environ["SEGBENCH_STANDIN_LOG"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"tool": tool, "argv": sys.argv[1:]}) + "\n")


def write_recording(case_id: str, target: Path) -> None:
    source = Path(os.environ["SEGBENCH_STANDIN_RECORDINGS"]) / f"{case_id}.nii.gz"
    if not source.is_file():
        sys.exit(f"stand-in: no recorded output for case {case_id} ({source})")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def value(argv: list[str], flag: str) -> str:
    if flag not in argv:
        sys.exit(f"stand-in: required flag {flag} missing from {argv}")
    return argv[argv.index(flag) + 1]
