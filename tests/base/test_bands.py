"""One age band (segbench.base.bands): a patient falls in the same group on a scored dataset and on a published set, and
every view shows a field's groups in their order."""

from __future__ import annotations

import numpy as np
import pandas as pd

from repo_paths import KITS_META, PUBLISHED, ROOT
from segbench.base.bands import LEVELS, level_order
from segbench.config.params import dataset_from_conf
from segbench.datasets.cases import load_metadata
from segbench.published.segauge import read_segauge_results
from segbench.stats.inputs import group_labels


def test_a_patient_has_one_age_band_on_every_board() -> None:
    """KiTS23 scored by the pipeline and KiTS23 published by segauge give the same cases the same age_band (they
    once read '40-59' on one board and '40-49' on the other)."""
    rows = read_segauge_results(PUBLISHED / "segauge_benchmark" / "kits23_modal.json", KITS_META)
    published = rows.drop_duplicates("case_id").set_index("case_id")["meta.age_band"]
    scored = load_metadata(dataset_from_conf(ROOT / "conf", "kits23", ROOT), list(published.index))["meta.age_band"]
    assert len(published) == 20 and published.notna().all() and set(published) <= set(LEVELS["age_band"])
    assert scored.to_dict() == published.to_dict()


def test_groups_are_shown_in_their_order() -> None:
    """A defined field in its definition's order; numeric bands by value (the statistics' quartile bands as they label
    them, and the bands of results written before the one definition); categories alphabetically."""
    assert level_order("age_band", ["80+", "40-49", "<40", "60-69"]) == ["<40", "40-49", "60-69", "80+"]
    assert level_order("age_band", ["60-74", ">=75", "<40", "40-59"]) == ["<40", "40-59", "60-74", ">=75"]
    assert level_order("gender", ["M", "F"]) == ["F", "M"] and level_order("phase", ["venous", "40"]) == ["40", "venous"]
    rng = np.random.default_rng(0)
    for values in (rng.normal(27, 4, 50).round(1), rng.normal(0, 1, 50).round(2), rng.normal(0, 1e6, 50)):
        labels = group_labels(pd.Series(values))  # the statistics' own labels of a numeric field's quartile bands
        first = labels.groupby(labels).apply(lambda group: values[group.index].min())
        assert level_order("score", sorted(set(labels))) == list(first.sort_values().index)
