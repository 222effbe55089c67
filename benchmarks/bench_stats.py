"""Benchmark of the statistics engine; prints ratios against baselines measured in the same run.

1. Touchstone (19 models x 9 organs x dice, nsd; B = 10,000; subgroups gender, manufacturer, age band;
   clustered bootstrap by institute):
   the complete analysis (docs/methodology.md#5-statistics-protocol) versus only the significance map done the plain way (a per-pair
   loop of scipy.stats.wilcoxon plus Holm over the same cells). Target: wall ratio <= 0.5. And the analysis with the
   verdict's default test (sign flips and the studentized bootstrap) against the sign flips alone, the test before
   issue #64: target <= 1.5.
2. A simulated JHH-scale dataset (5,160 cases x 20 models x 9 organs x dice, nsd), run in a child
   process so that its peak resident memory is its own. Targets: <= 15 s wall, <= 1 GB.

Every figure is printed beside the committed one (benchmarks/results_bench_stats.txt as of the last commit that
changed it, read with git) and today's / committed ratio, with the machine's load average.

Usage: PYTHONPATH=src python benchmarks/bench_stats.py [--jhh-only]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from segbench.base.bands import age_band
from segbench.published.readers import read_touchstone
from segbench.stats import StatsSettings, analyze

ROOT = Path(__file__).resolve().parents[1]
TOUCHSTONE = ROOT / "data" / "published" / "touchstone_totalsegmentator"
METRICS = {"dice": True, "nsd": True}
FIELDS = ["gender", "manufacturer", "age_band"]
CLUSTER_FIELD = "institute"  # as conf/published/touchstone_totalsegmentator.yaml
RESULTS = "benchmarks/results_bench_stats.txt"
#: the committed figures: line prefix -> pattern of the numbers compared
FIGURES = {
    "touchstone: complete analysis": r"wall (\S+) s, cpu (\S+) s",
    "touchstone: per-pair scipy.stats.wilcoxon loop": r"wall (\S+) s, cpu (\S+) s",
    "touchstone: ratio complete / wilcoxon-loop": r"wall (\S+), cpu (\S+)",
    "touchstone: sign flips + bootstrap-t / sign flips alone": r"wall (\S+) .*?cpu (\S+) ",
    "jhh-scale": r"wall (\S+) s, cpu (\S+) s.*?peak RSS of the process (\S+) GB",
}


def committed() -> tuple[str, dict[str, list[float]]]:
    """The commit that last changed the results file and its figures per line prefix (empty without git)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout

    commit = git("log", "-1", "--format=%h", "--", RESULTS).strip()
    figures = {}
    for line in git("show", f"{commit}:{RESULTS}").splitlines() if commit else []:
        for prefix, pattern in FIGURES.items():
            found = re.search(pattern, line) if line.startswith(prefix) else None
            if found and prefix not in figures:
                figures[prefix] = [float(x) for x in found.groups()]
    return commit, figures


def beside(prefix: str, today: list[float], names: tuple[str, ...]) -> str:
    """'(committed at <commit>: ...; today / committed: ...)' for the figures of one line."""
    commit, figures = committed()
    before = figures.get(prefix)
    if not before:
        return "(no committed figure)"
    then = ", ".join(f"{n} {b:g}" for n, b in zip(names, before))
    ratio = ", ".join(f"{n} {t / b:.2f}" for n, t, b in zip(names, today, before) if b)
    return f"(committed at {commit}: {then}; today / committed: {ratio})"


def wilcoxon_loop(results: dict) -> int:
    """The baseline: per structure/metric, scipy.stats.wilcoxon for every ordered pair, then Holm."""
    n_tests = 0
    for cell in results["structures"].values():
        for res in cell["metrics"].values():
            models = res["ranking"]["order"]
            values = {m: np.asarray(res["per_case"][m]) for m in models}
            p = []
            for a in models:
                for b in models:
                    if a != b:
                        p.append(stats.wilcoxon(values[a], values[b], alternative="greater").pvalue)
            p = np.asarray(p)
            order = np.argsort(p, kind="stable")
            np.minimum(1.0, np.maximum.accumulate((p.size - np.arange(p.size)) * p[order]))
            n_tests += p.size
    return n_tests


def timed(fn, *args, **kwargs) -> tuple[object, float, float]:
    """Result, wall seconds and CPU seconds of this process (CPU time is less hurt by a busy machine)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def touchstone() -> None:
    rows = read_touchstone(TOUCHSTONE)
    results, w_full, c_full = timed(analyze, rows, metrics=METRICS, settings=StatsSettings(), subgroup_fields=FIELDS, cluster_field=CLUSTER_FIELD)
    n_tests, w_loop, c_loop = timed(wilcoxon_loop, results)
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} (5 min {load[1]:.1f}) on {os.cpu_count()} cores")
    print(
        f"touchstone: complete analysis (B=10,000, {len(results['structures'])} organs x 2 metrics, "
        f"subgroups {', '.join(FIELDS)}, clustered by {CLUSTER_FIELD}): wall {w_full:.2f} s, cpu {c_full:.2f} s "
        + beside("touchstone: complete analysis", [w_full, c_full], ("wall", "cpu"))
    )
    print(
        f"touchstone: per-pair scipy.stats.wilcoxon loop + Holm ({n_tests} tests): "
        f"wall {w_loop:.2f} s, cpu {c_loop:.2f} s " + beside("touchstone: per-pair scipy.stats.wilcoxon loop", [w_loop, c_loop], ("wall", "cpu"))
    )
    ratios = [w_full / w_loop, c_full / c_loop]
    # the verdict's studentized bootstrap half (issue #64) against the analysis before it (the sign flips alone):
    # alternating, the fastest of two each (the first analysis above paid numba's start)
    alone, both, flips_only = [], [], StatsSettings(pairwise_test="sign_flip")
    for _ in range(2):
        alone.append(timed(analyze, rows, metrics=METRICS, settings=flips_only, subgroup_fields=FIELDS, cluster_field=CLUSTER_FIELD)[1:])
        both.append(timed(analyze, rows, metrics=METRICS, settings=StatsSettings(), subgroup_fields=FIELDS, cluster_field=CLUSTER_FIELD)[1:])
    (w_alone, c_alone), (w_both, c_both) = min(alone), min(both)
    print(
        f"touchstone: sign flips + bootstrap-t / sign flips alone: wall {w_both / w_alone:.2f} ({w_both:.2f} / {w_alone:.2f} s), "
        f"cpu {c_both / c_alone:.2f} ({c_both:.2f} / {c_alone:.2f} s) (target: wall <= 1.5) "
        + beside("touchstone: sign flips + bootstrap-t / sign flips alone", [w_both / w_alone, c_both / c_alone], ("wall", "cpu"))
    )
    print(
        f"touchstone: ratio complete / wilcoxon-loop: wall {ratios[0]:.2f}, cpu {ratios[1]:.2f} (target: wall <= 0.5) "
        + beside("touchstone: ratio complete / wilcoxon-loop", ratios, ("wall", "cpu"))
    )


def simulated_rows(n_cases: int = 5160, n_models: int = 20, n_structures: int = 9, seed: int = 0) -> pd.DataFrame:
    """JHH-scale per-case table: per-model skill + per-case difficulty + noise, 5 % organs absent."""
    rng = np.random.default_rng(seed)
    cases = np.array([f"case_{i:05d}" for i in range(n_cases)])
    structures = [f"organ_{s}" for s in range(n_structures)]
    meta = pd.DataFrame(
        {
            "case_id": cases,
            "meta.gender": rng.choice(["f", "m"], n_cases),
            "meta.manufacturer": rng.choice(["ge", "philips", "siemens", "toshiba"], n_cases, p=[0.3, 0.2, 0.45, 0.05]),
            "meta.age_band": age_band(pd.Series(rng.normal(60, 14, n_cases).round())).to_numpy(),
        }
    )
    frames = []
    for s in structures:
        present = rng.random(n_cases) > 0.05
        difficulty = rng.normal(0, 0.08, n_cases)
        for m in range(n_models):
            dice = np.clip(0.85 + 0.004 * m + difficulty + rng.normal(0, 0.05, n_cases), 0, 1)
            nsd = np.clip(dice - 0.05 + rng.normal(0, 0.03, n_cases), 0, 1)
            frames.append(
                pd.DataFrame(
                    {
                        "model": f"model_{m:02d}",
                        "case_id": cases,
                        "structure": s,
                        "reference_present": present,
                        "dice": np.where(present, dice, np.nan),
                        "nsd": np.where(present, nsd, np.nan),
                    }
                )
            )
    return pd.concat(frames, ignore_index=True).merge(meta, on="case_id")


def jhh() -> None:
    rows = simulated_rows()
    _, wall, cpu = timed(analyze, rows, metrics=METRICS, settings=StatsSettings(), subgroup_fields=FIELDS)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux: KiB
    load = os.getloadavg()
    print(
        f"jhh-scale (5,160 cases x 20 models x 9 organs x 2 metrics, B=10,000, 3 subgroup fields): "
        f"wall {wall:.1f} s, cpu {cpu:.1f} s (target: wall <= 15 s), peak RSS of the process {peak_gb:.2f} GB "
        f"(target <= 1 GB); load average {load[0]:.1f} (5 min {load[1]:.1f}) " + beside("jhh-scale", [wall, cpu, peak_gb], ("wall", "cpu", "GB"))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jhh-only", action="store_true", help="run only the simulated JHH-scale set (child mode)")
    args = parser.parse_args()
    if args.jhh_only:
        jhh()
        return
    touchstone()
    subprocess.run([sys.executable, __file__, "--jhh-only"], check=True)


if __name__ == "__main__":
    main()
