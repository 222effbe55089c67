"""Cases a model left identical to the reference (docs/methodology.md#2-model-kinds).

A prediction that equals the reference is suspicious: a simulated model that should have changed the case did not
(e.g. a boundary move too small for the grid), or a real model copied the reference. It is derived here from the
per-case rows, where the data flows, and not in the simulator, so that the leaderboard's analysis
(``analysis.analyze``: ``models.<model>.identical_to_reference``) and the calibration audit (``calibration.audit``)
count it the same way, with this one function.

A case is **identical to the reference** for a model when every scored structure of that case has Dice exactly 1.
Structures absent from both the reference and the prediction are scored Dice 1 by the empty-mask rule
(docs/methodology.md#4-empty-masks-and-missing-predictions), so they count as agreeing; a structure the reference lacks
but the prediction holds, or a missing prediction, is a worst-case row with Dice 0, so the case is not identical. Rows
without a Dice value (NaN: a published set that does not report one, e.g. where the reference is absent) are left
out; a case with no Dice value at all is not counted.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

#: the column that decides: Dice exactly 1 on every scored structure of the case
DICE = "dice"


def identical_to_reference(rows: pd.DataFrame, models: Sequence[str] | None = None) -> dict[str, dict[str, int] | None]:
    """Per model: ``{"cases": k, "of": n}``, the k of its n scored cases in which every structure has Dice exactly 1.

    ``rows``: per-case rows (columns ``model``, ``case_id``, ``structure``, ``dice``, ...). ``models``: the models to
    report (default: those in the rows); a model without rows counts 0 of 0. None for every model when the rows have
    no Dice column.
    """
    names = sorted(rows["model"].astype(str).unique()) if models is None else list(models)
    if DICE not in rows.columns:
        return dict.fromkeys(names)
    dice = rows[DICE].to_numpy(dtype=np.float64, na_value=np.nan)
    scored = ~np.isnan(dice)
    per_case = (
        pd.DataFrame(
            {
                "model": rows["model"].astype(str).to_numpy()[scored],
                "case_id": rows["case_id"].astype(str).to_numpy()[scored],
                "one": dice[scored] == 1.0,
            }
        )
        .groupby(["model", "case_id"], sort=False)["one"]
        .all()
    )
    cases = per_case.groupby(level="model", sort=False).agg(["sum", "size"])
    return {m: {"cases": int(cases.at[m, "sum"]), "of": int(cases.at[m, "size"])} if m in cases.index else {"cases": 0, "of": 0} for m in names}
