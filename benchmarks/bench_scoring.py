"""Scoring speed and agreement on real KiTS23 cases: segauge vs segbench's engine vs the decode floor.

For each case a simulated prediction (tests/support/simulate_kits.py; kinds cycle, the last cases are
gross errors) is written as NIfTI; then, in this one run and on this machine:

* decode floor: nibabel load + decompress of reference and prediction;
* engine: segbench.scoring.score_case on the two files (all three KiTS regions, detection on tumor);
* segauge: decode once, then for each region segauge's dice, iou, surface_metrics and
  detection_scores on the full volumes, on ``--segauge-cases`` of the non-gross cases only, spread
  evenly over the list (it takes minutes per case, and hours on a missed kidney).

Each runs in a fresh process of its own, so that no measurement moves another: the floor is mostly
memory, not inflate (a KiTS volume is over glibc's 32 MiB mmap threshold, so each load maps it
afresh and faults its pages in), and it ran 30 % faster after segauge's large arrays had left the
process's heap in another state, while the engine, which never builds the full volumes, did not move.
The floor and the engine are timed twice: with glibc's default allocator (the claim) and, as
sensitivity, with an allocator that keeps its heap (no page faulted in twice: the inflate alone).

Prints seconds per case, ratios (on the cases both ran), and per-metric agreement of the engine
with segauge; beside today's engine/decode ratio, the committed run's (results_bench_scoring.txt)
and today's over it, with the machine's load average (the ratio moves with load: the engine's
search uses both cores, the decode one). With ``--repeat N`` the decode floor and the engine are each timed N times per case,
alternately, and each keeps its fastest (the machine is shared: the minimum is the least disturbed
measurement, taken the same way for both). Usage:
    PYTHONPATH=src python benchmarks/bench_scoring.py --cases 20 --segauge-cases 3 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nibabel as nib
import numpy as np
import segauge

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))  # the simulated errors, which the tests score too
from segbench.scoring.engine import score_case  # noqa: E402
from segbench.scoring.settings import Region
from simulate_kits import GROSS_KINDS, KINDS, simulate  # noqa: E402

REGIONS = (
    Region("kidney_and_mass", (1, 2, 3), 1.0331),
    Region("mass", (2, 3), 1.1329),
    Region("tumor", (2,), 1.1498, detection=True),
)
RESULTS = Path(__file__).resolve().parent / "results_bench_scoring.txt"
COMPARED = ("dice", "iou", "hd", "hd95", "assd", "masd", "nsd", "det_precision", "det_recall", "det_f1")


def decode(path: Path) -> np.ndarray:
    """The decode floor: what any scorer must do at least once per file."""
    return np.asanyarray(nib.load(path).dataobj)


def segauge_case(reference: Path, prediction: Path) -> dict[str, dict[str, float]]:
    """segauge 0.1.0 on full volumes, one decode per file, every region."""
    ref_img = nib.load(reference)
    ref, pred = np.asanyarray(ref_img.dataobj), decode(prediction)
    spacing = tuple(float(z) for z in ref_img.header.get_zooms())
    out = {}
    for region in REGIONS:
        g, p = np.isin(ref, region.labels), np.isin(pred, region.labels)
        row = {"dice": segauge.dice(p, g), "iou": segauge.iou(p, g)}
        row |= segauge.surface_metrics(p, g, spacing, nsd_tolerance=region.nsd_tolerance_mm)
        if region.detection:
            det = segauge.detection_scores(p, g)
            row |= {"det_precision": det.precision, "det_recall": det.recall, "det_f1": det.f1}
        out[region.name] = row
    return out


def committed_figures(path: Path = RESULTS) -> dict[str, float]:
    """The committed run's s/case of the decode floor and the engine, and its engine/decode ratio (empty if absent)."""
    if not path.is_file():
        return {}
    text = path.read_text()
    out = {}
    for key, pattern in (("decode", r"decode floor\s+([0-9.]+) s/case"), ("engine", r"engine\s+([0-9.]+) s/case"), ("ratio", r"engine/decode = ([0-9.]+)x")):
        found = re.search(pattern, text)
        if found:
            out[key] = float(found.group(1))
    return out


#: the allocator of the sensitivity run: glibc serves every array from a heap it never trims, so a freed volume's pages are
#: reused without faulting them in again (by default an array over 32 MiB, a KiTS volume, is mapped afresh and its pages
#: faulted in on every load)
KEPT_HEAP = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 32)}


def warm_up(tmp: Path) -> float:
    """Once per process: load the compiled kernels and build the cell tables; the prediction's far blob takes the
    far-point path too (the hierarchy, built only when needed). Seconds taken."""
    t0 = time.perf_counter()
    ball = np.zeros((40, 24, 24), dtype=np.uint8)
    ball[3:9, 3:9, 3:9] = 1
    pred = np.roll(ball, 1, axis=2)
    pred[32:36, 15:19, 15:19] = 1
    affine = np.diag([2.0, 0.8, 0.8, 1.0])
    nib.save(nib.Nifti1Image(ball, affine), tmp / "warm_ref.nii.gz")
    nib.save(nib.Nifti1Image(pred, affine), tmp / "warm_pred.nii.gz")
    score_case("warm-up", tmp / "warm_ref.nii.gz", tmp / "warm_pred.nii.gz", REGIONS)
    return time.perf_counter() - t0


def timing_worker(pairs: list[tuple[Path, Path]], repeat: int) -> None:
    """Child mode: per (reference, prediction) pair, the decode floor and the engine timed ``repeat`` times, alternately,
    each keeping its fastest; one JSON line per pair on stdout (the engine's rows with it)."""
    with tempfile.TemporaryDirectory(prefix="bench_scoring_warm_") as tmp:
        print(json.dumps({"warm_up": warm_up(Path(tmp))}), flush=True)
    for ref_path, pred_path in pairs:
        dec_times, eng_times = [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            decode(ref_path), decode(pred_path)
            dec_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            rows = score_case(ref_path.name, ref_path, pred_path, REGIONS)
            eng_times.append(time.perf_counter() - t0)
        print(json.dumps({"decode": min(dec_times), "engine": min(eng_times), "rows": rows}, default=float), flush=True)
        print(f"  timed {ref_path.name}: decode {min(dec_times):.2f}s engine {min(eng_times):.2f}s", file=sys.stderr, flush=True)


def segauge_worker(pairs: list[tuple[Path, Path]]) -> None:
    """Child mode: segauge on each pair, one JSON line each (seconds and its metrics per region)."""
    for ref_path, pred_path in pairs:
        t0 = time.perf_counter()
        rows = segauge_case(ref_path, pred_path)
        print(json.dumps({"seconds": time.perf_counter() - t0, "rows": rows}, default=float), flush=True)
        print(f"  segauge {ref_path.name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)


def child(mode: str, pairs: list[tuple[Path, Path]], repeat: int = 1, env: dict[str, str] | None = None) -> list[dict]:
    """Run this script in ``mode`` on ``pairs`` in a fresh process (its allocator in a known state, untouched by the
    other measurements: segauge's large arrays left the parent's heap so that nibabel's loads ran 30 % faster after
    them); its JSON lines (its progress, a line per pair on stderr, passes through)."""
    args = [sys.executable, __file__, mode, "--repeat", str(repeat), *(str(p) for pair in pairs for p in pair)]
    done = subprocess.run(args, check=True, stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    return [json.loads(line) for line in done.stdout.splitlines()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("data/kits23/labels"))
    ap.add_argument("--cases", type=int, default=22, help="cases for engine and decode floor")
    ap.add_argument("--segauge-cases", type=int, default=5, help="M non-gross cases also scored by segauge")
    ap.add_argument("--gross", type=int, default=2, help="how many of the last cases get gross errors")
    ap.add_argument("--repeat", type=int, default=1, help="time floor and engine N times per case, alternately; keep each one's fastest")
    ap.add_argument("--timing-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--segauge-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("pairs", nargs="*", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    pairs = list(zip(args.pairs[::2], args.pairs[1::2], strict=True))
    if args.timing_worker:
        return timing_worker(pairs, args.repeat)
    if args.segauge_worker:
        return segauge_worker(pairs)

    files = sorted(args.data.glob("case_*.nii.gz"))[: args.cases]
    n_gross = min(args.gross, len(files))
    kinds = [KINDS[i % len(KINDS)] for i in range(len(files) - n_gross)]
    kinds += [GROSS_KINDS[i % len(GROSS_KINDS)] for i in range(n_gross)]
    n_plain = len(files) - n_gross
    seg_n = min(args.segauge_cases, n_plain)
    seg_idx = sorted(set(np.linspace(0, n_plain - 1, seg_n).round().astype(int).tolist())) if seg_n else []
    diffs: dict[str, list[float]] = {m: [] for m in COMPARED}
    with tempfile.TemporaryDirectory(prefix="bench_scoring_") as tmp:
        pairs = []
        for ref_path, kind in zip(files, kinds, strict=True):
            img = nib.load(ref_path)
            pairs.append((ref_path, Path(tmp) / ref_path.name))
            nib.save(nib.Nifti1Image(simulate(np.asanyarray(img.dataobj), img.header.get_zooms(), kind), img.affine, img.header), pairs[-1][1])
        timed = child("--timing-worker", pairs, args.repeat)
        print(f"engine warm-up (once per process, excluded below) {timed[0]['warm_up']:.2f}s")
        timed = timed[1:]
        kept = child("--timing-worker", pairs, args.repeat, KEPT_HEAP)[1:]
        seg = child("--segauge-worker", [pairs[i] for i in seg_idx]) if seg_idx else []
    for i, (ref_path, kind) in enumerate(zip(files, kinds, strict=True)):
        msg = f"[{i + 1}/{len(files)}] {ref_path.name} {kind:16s} decode {timed[i]['decode']:6.2f}s engine {timed[i]['engine']:6.2f}s"
        msg += f"   heap kept: decode {kept[i]['decode']:6.2f}s engine {kept[i]['engine']:6.2f}s"
        if i in seg_idx:
            theirs = seg[seg_idx.index(i)]
            msg += f" segauge {theirs['seconds']:7.1f}s"
            for row in timed[i]["rows"]:
                for m in COMPARED:
                    if m in theirs["rows"][row["structure"]] and not row["worst_case"]:
                        diffs[m].append(float(row[m]) - float(theirs["rows"][row["structure"]][m]))
        print(msg)

    dec, eng = np.mean([t["decode"] for t in timed]), np.mean([t["engine"] for t in timed])
    dec_kept, eng_kept = np.mean([t["decode"] for t in kept]), np.mean([t["engine"] for t in kept])
    committed = committed_figures()
    print(f"\nload average {os.getloadavg()[0]:.1f} (1 min) on {os.cpu_count()} cores")
    print(
        f"{len(files)} cases ({', '.join(sorted(set(kinds)))}); segauge on cases {seg_idx}; floor and engine: fastest of "
        f"{args.repeat} per case, each setting in a fresh process of its own (segauge in a third)"
    )
    print(f"decode floor  {dec:8.3f} s/case   (nibabel's load in a process with glibc's default allocator)")
    print(f"engine        {eng:8.3f} s/case   engine/decode = {eng / dec:.2f}x (target <= 1.5x)")
    print(
        f"sensitivity, the allocator keeping its heap ({' '.join(f'{k}={v}' for k, v in KEPT_HEAP.items())}): decode floor "
        f"{dec_kept:.3f} s/case (the inflate alone: no page faulted in), engine {eng_kept:.3f} s/case, engine/decode = "
        f"{eng_kept / dec_kept:.2f}x"
    )
    if committed.keys() >= {"decode", "engine", "ratio"}:
        print(
            f"committed     decode {committed['decode']:.3f} s/case, engine {committed['engine']:.3f} s/case, "
            f"engine/decode = {committed['ratio']:.2f}x ({RESULTS.name}; its own cases and machine load)"
        )
        print(
            f"today/committed: engine/decode ratio {eng / dec / committed['ratio']:.2f}, engine s/case "
            f"{eng / committed['engine']:.2f}, decode s/case {dec / committed['decode']:.2f}"
        )
    if seg:
        seg_s, eng_sub = np.mean([t["seconds"] for t in seg]), np.mean([timed[i]["engine"] for i in seg_idx])
        print(f"segauge       {seg_s:8.3f} s/case   segauge/engine = {seg_s / eng_sub:.1f}x (same {len(seg)} cases)")
        print("\nagreement with segauge (engine - segauge; non-worst-case regions):")
        for m, d in diffs.items():
            if d:
                a = np.abs(d)
                print(f"  {m:14s} n={len(d):3d} max|diff| {a.max():.3g}  mean diff {np.mean(d):+.3g}  p95|diff| {np.quantile(a, 0.95):.3g}")


if __name__ == "__main__":
    main()
