"""Cases needed to separate the top two models (docs/methodology.md#511-power)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats
from scipy.special import ndtri

_EXACT_UP_TO = 1_000_000  # beyond this the t and normal answers coincide; skip the noncentral-t search


def paired_t_power(n: int, effect: float, alpha: float) -> float:
    """Power of the two-sided paired t-test with n pairs at standardised effect d_z (noncentral t)."""
    df, shift = n - 1, effect * math.sqrt(n)
    crit = stats.t.ppf(1.0 - alpha / 2.0, df)
    return float(stats.nct.sf(crit, df, shift) + stats.nct.cdf(-crit, df, shift))


def cases_needed(diffs: np.ndarray, alpha: float, power: float) -> dict[str, float | int | None]:
    """Smallest n at which a two-sided paired t-test at ``alpha`` reaches ``power`` for the observed effect.

    Effect size d_z = |mean(diff)| / sd(diff) of the per-case differences #1 - #2. Start from the normal
    formula with Guenther's (1981) t correction, ((z_{1-alpha/2} + z_power) / d_z)^2 + z_{1-alpha/2}^2 / 2,
    then step to the exact smallest n under the noncentral t (usually 0-1 steps). None when d_z is
    undefined or zero.
    """
    n = diffs.size
    mean = float(diffs.mean()) if n else math.nan
    sd = float(diffs.std(ddof=1)) if n > 1 else math.nan
    effect = abs(mean) / sd if (math.isfinite(sd) and sd > 0) else math.nan
    n_required = None
    if math.isfinite(effect) and effect > 0:
        z_a, z_b = ndtri(1.0 - alpha / 2.0), ndtri(power)
        n_required = max(2, int(math.ceil(((z_a + z_b) / effect) ** 2 + z_a**2 / 2.0)))
        if n_required <= _EXACT_UP_TO:
            while paired_t_power(n_required, effect, alpha) < power:
                n_required += 1
            while n_required > 2 and paired_t_power(n_required - 1, effect, alpha) >= power:
                n_required -= 1
    return {"mean_diff": mean, "sd_diff": sd, "effect_size": effect, "n_required": n_required}
