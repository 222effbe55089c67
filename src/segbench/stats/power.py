"""Cases needed to separate the top two models (SPEC §4.8)."""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtri


def cases_needed(diffs: np.ndarray, alpha: float, power: float) -> dict[str, float | int | None]:
    """Paired-t sample size from the observed per-case differences #1 - #2.

    Effect size d_z = |mean(diff)| / sd(diff); n = ceil(((z_{1-alpha/2} + z_power) / d_z)^2
    + z_{1-alpha/2}^2 / 2), the normal formula with Guenther's (1981) correction for the t distribution
    (two-sided test at ``alpha``). None when the effect size is undefined or zero.
    """
    n = diffs.size
    mean = float(diffs.mean()) if n else math.nan
    sd = float(diffs.std(ddof=1)) if n > 1 else math.nan
    effect = abs(mean) / sd if (math.isfinite(sd) and sd > 0) else math.nan
    n_required = None
    if math.isfinite(effect) and effect > 0:
        z_a, z_b = ndtri(1.0 - alpha / 2.0), ndtri(power)
        n_required = int(math.ceil(((z_a + z_b) / effect) ** 2 + z_a**2 / 2.0))
    return {"mean_diff": mean, "sd_diff": sd, "effect_size": effect, "n_required": n_required}
