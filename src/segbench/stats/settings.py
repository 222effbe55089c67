"""Settings of the statistics engine (docs/methodology.md#51-settings), validated once at construction."""

from __future__ import annotations

from dataclasses import asdict, dataclass

CI_METHODS = ("percentile", "bca", "skew_t")
MULTIPLE_COMPARISONS = ("holm", "bonferroni")
CASE_ALIGNMENTS = ("shared", "pairwise_complete")
PAIRWISE_TESTS = ("sign_flip_bootstrap_t", "sign_flip", "bootstrap_ci")
#: the level of the leaderboard's CIs of means: the one the calibration audit chose so that the CI covers at
#: ``confidence`` (where it audited the cell's population and CI method), or ``confidence`` itself
CI_LEVELS = ("audited", "nominal")


@dataclass(frozen=True)
class StatsSettings:
    """Knobs of the statistics protocol; the defaults are conf/stats/default.yaml's (B=10,000, 95 %, Holm, alpha 0.05)."""

    n_resamples: int = 10_000
    confidence: float = 0.95
    seed: int = 0
    ci_method: str = "skew_t"
    ci_level: str = "audited"
    pairwise_test: str = "sign_flip_bootstrap_t"
    multiple_comparison: str = "holm"
    alpha: float = 0.05
    subgroup_min_cases: int = 10
    power: float = 0.80
    case_alignment: str = "shared"
    scheme_resamples: int = 1000

    def __post_init__(self) -> None:
        _check_int(self.n_resamples, "n_resamples", minimum=1)
        _check_int(self.seed, "seed", minimum=0)
        _check_int(self.scheme_resamples, "scheme_resamples", minimum=1)
        _check_int(self.subgroup_min_cases, "subgroup_min_cases", minimum=2)
        for name in ("confidence", "alpha", "power"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
                raise ValueError(f"StatsSettings.{name} must be a number in (0, 1), got {value!r}")
        if self.ci_method not in CI_METHODS:
            raise ValueError(f"StatsSettings.ci_method must be one of {CI_METHODS}, got {self.ci_method!r}")
        if self.ci_level not in CI_LEVELS:
            raise ValueError(f"StatsSettings.ci_level must be one of {CI_LEVELS}, got {self.ci_level!r}")
        if self.pairwise_test not in PAIRWISE_TESTS:
            raise ValueError(f"StatsSettings.pairwise_test must be one of {PAIRWISE_TESTS}, got {self.pairwise_test!r}")
        if self.multiple_comparison not in MULTIPLE_COMPARISONS:
            raise ValueError(f"StatsSettings.multiple_comparison must be one of {MULTIPLE_COMPARISONS}, got {self.multiple_comparison!r}")

        if self.case_alignment not in CASE_ALIGNMENTS:
            raise ValueError(f"StatsSettings.case_alignment must be one of {CASE_ALIGNMENTS}, got {self.case_alignment!r}")

    def to_dict(self) -> dict:
        """Plain-JSON form, stored in the results so they can be re-derived."""
        return {key: (float(v) if isinstance(v, float) else v) for key, v in asdict(self).items()}


def _check_int(value: object, name: str, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"StatsSettings.{name} must be an integer >= {minimum}, got {value!r}")
