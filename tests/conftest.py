"""Shared fixtures: the real published Touchstone scores (tests skip when the data bundle is absent)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "published"
TOUCHSTONE = DATA / "touchstone_totalsegmentator"
SEGAUGE_KITS = DATA / "segauge_benchmark" / "kits23_seed.json"
KITS_META = DATA.parent / "kits23" / "kits23.json"


@pytest.fixture(scope="session")
def touchstone_rows() -> pd.DataFrame:
    if not TOUCHSTONE.is_dir():
        pytest.skip("data bundle not pulled (dvc pull)")
    from segbench.published import read_touchstone

    return read_touchstone(TOUCHSTONE)
