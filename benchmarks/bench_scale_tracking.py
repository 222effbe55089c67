"""Scale simulation of a shared tracking server: SIMULATED per-case rows logged through it, then compared from it.

5,160 cases x 20 models x 9 structures x dice, nsd of SIMULATED rows (bench_stats.simulated_rows: per-model skill,
per-case difficulty, noise; nothing here is a real model's score) go through a real MLflow server on PostgreSQL
with proxied artifacts (tests/support/services.py starts both on loopback in a temp dir), one score bundle and run per
model via segbench.tracking.runs.log_bundle. Then compare's path: the rows read back from the server
(tracking.read_runs) and stats.analyze with the default settings. Track and compare each run in a child process,
so each peak resident memory is its own. Goal: compare <= 60 s and <= 2 GB; track throughput in rows/s.

Usage: PYTHONPATH=src python benchmarks/bench_scale_tracking.py [--small]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))  # the service starters the tests use

from bench_stats import FIELDS, METRICS, simulated_rows  # noqa: E402

from segbench.stats import StatsSettings, analyze  # noqa: E402
from segbench.tracking import runs as tracking  # noqa: E402
from services import tracking_server  # noqa: E402

DATASET = "scale_simulated"
FULL = {"n_cases": 5160, "n_models": 20, "n_structures": 9}
SMALL = {"n_cases": 200, "n_models": 3, "n_structures": 2}


def bundles(size: dict[str, int]) -> list[tracking.ScoreBundle]:
    """One score bundle per SIMULATED model, shaped as the score stage writes them."""
    rows = simulated_rows(**size)
    rows["model"] = rows["model"].str.replace("model_", "simulated_", regex=False)
    out = []
    for model, part in rows.groupby("model", sort=True):
        buffer = io.StringIO()
        part.to_csv(buffer, index=False, lineterminator="\n")
        record = {
            "tags": {"segbench.dataset": DATASET, "segbench.model": model, "segbench.kind": "simulated", "segbench.dataset_version": "simulated"},
            "params": {"dataset.source": "simulated rows (benchmarks/bench_scale_tracking.py)", "simulated": "true"},
            "metrics": {f"{s}.dice.mean": float(v) for s, v in part.groupby("structure")["dice"].mean().items()},
        }
        out.append(tracking.ScoreBundle(buffer.getvalue().encode(), record))
    return out


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux: KiB


def track(uri: str, size: dict[str, int], fingerprints_file: Path) -> None:
    """Child: log every model's bundle through the server; print wall time, rows/s and peak memory."""
    made = bundles(size)
    n_rows = sum(b.per_case_csv.count(b"\n") - 1 for b in made)
    start = time.perf_counter()
    for bundle in made:
        tracking.log_bundle(bundle, uri)
    wall = time.perf_counter() - start
    fingerprints_file.write_text(json.dumps({b.record["tags"]["segbench.model"]: b.fingerprint for b in made}), encoding="utf-8")
    print(
        f"track: {len(made)} runs, {n_rows:,} SIMULATED per-case rows, one process, wall {wall:.1f} s, "
        f"{n_rows / wall:,.0f} rows/s, peak RSS {peak_rss_gb():.2f} GB"
    )


def compare(uri: str, fingerprints_file: Path) -> None:
    """Child: read the rows back from the server and analyse them as compare does; print times and peak memory."""
    fingerprints = json.loads(fingerprints_file.read_text(encoding="utf-8"))
    start = time.perf_counter()
    runs = tracking.read_runs(DATASET, fingerprints, uri)
    read = time.perf_counter() - start
    settings = StatsSettings()
    analyze(runs.rows, metrics=METRICS, settings=settings, subgroup_fields=FIELDS)
    wall = time.perf_counter() - start
    print(
        f"compare: read {len(runs.rows):,} rows of {len(runs.run_ids)} runs from the server in {read:.1f} s, "
        f"stats.analyze (n_resamples={settings.n_resamples:,}, subgroups {', '.join(FIELDS)}) {wall - read:.1f} s; "
        f"wall {wall:.1f} s (goal <= 60 s), peak RSS {peak_rss_gb():.2f} GB (goal <= 2 GB)"
    )


def child(*args: str) -> None:
    subprocess.run([sys.executable, __file__, *args], check=True, env={**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help=f"a quick check: {SMALL}")
    parser.add_argument("--child", nargs=3, metavar=("STEP", "URI", "FINGERPRINTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = SMALL if args.small else FULL
    if args.child:
        step, uri, fingerprints = args.child
        track(uri, size, Path(fingerprints)) if step == "track" else compare(uri, Path(fingerprints))
        return
    print(
        f"SIMULATED rows: {size['n_cases']:,} cases x {size['n_models']} models x {size['n_structures']} structures x dice, nsd; "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp, tracking_server(Path(tmp)) as server:
        print(f"tracking server: MLflow on PostgreSQL 15, proxied artifacts, {server.uri}", flush=True)
        fingerprints = str(Path(tmp) / "fingerprints.json")
        small = ["--small"] if args.small else []
        child(*small, "--child", "track", server.uri, fingerprints)
        child(*small, "--child", "compare", server.uri, fingerprints)


if __name__ == "__main__":
    main()
