"""Scoring speed and agreement on real KiTS23 cases: segauge vs segbench's engine vs the decode floor.

For each case a simulated prediction (tests/simulate_kits.py; kinds cycle, the last cases are
gross errors) is written as NIfTI; then, in this one run and on this machine:

* decode floor: nibabel load + decompress of reference and prediction;
* engine: segbench.scoring.score_case on the two files (all three KiTS regions, detection on tumor);
* segauge: decode once, then for each region segauge's dice, iou, surface_metrics and
  detection_scores on the full volumes, on ``--segauge-cases`` of the non-gross cases only, spread
  evenly over the list (it takes minutes per case, and hours on a missed kidney).

Prints seconds per case, ratios (on the cases both ran), and per-metric agreement of the engine
with segauge; beside today's engine/decode ratio, the committed run's (results_bench_scoring.txt)
and today's over it, with the machine's load average (the ratio moves with load: the engine's
search uses both cores, the decode one). With ``--repeat N`` the decode floor and the engine are each timed N times per case,
alternately, and each keeps its fastest (the machine is shared: the minimum is the least disturbed
measurement, taken the same way for both). Usage:
    PYTHONPATH=src python benchmarks/bench_scoring.py --cases 22 --segauge-cases 20
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import nibabel as nib
import numpy as np
import segauge

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the simulated errors, which the tests score too
from segbench.scoring import Region, score_case  # noqa: E402
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
    for key, pattern in (("decode", r"decode floor\s+([0-9.]+) s/case"), ("engine", r"engine\s+([0-9.]+) s/case"),
                         ("ratio", r"engine/decode = ([0-9.]+)x")):
        found = re.search(pattern, text)
        if found:
            out[key] = float(found.group(1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("data/kits23/labels"))
    ap.add_argument("--cases", type=int, default=22, help="cases for engine and decode floor")
    ap.add_argument("--segauge-cases", type=int, default=5, help="M non-gross cases also scored by segauge")
    ap.add_argument("--gross", type=int, default=2, help="how many of the last cases get gross errors")
    ap.add_argument("--repeat", type=int, default=1, help="time floor and engine N times per case, alternately; keep each one's fastest")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    files = sorted(args.data.glob("case_*.nii.gz"))[: args.cases]
    n_gross = min(args.gross, len(files))
    kinds = [KINDS[i % len(KINDS)] for i in range(len(files) - n_gross)]
    kinds += [GROSS_KINDS[i % len(GROSS_KINDS)] for i in range(n_gross)]
    n_plain = len(files) - n_gross
    seg_n = min(args.segauge_cases, n_plain)
    seg_idx = set(np.linspace(0, n_plain - 1, seg_n).round().astype(int).tolist()) if seg_n else set()
    t_dec, t_eng, t_seg = [], [], []
    diffs: dict[str, list[float]] = {m: [] for m in COMPARED}
    with tempfile.TemporaryDirectory(prefix="bench_scoring_") as tmp:
        # once per process, not per case: load the compiled kernels and build the cell tables; the
        # prediction's far blob takes the far-point path too (the hierarchy, built only when needed)
        t0 = time.perf_counter()
        ball = np.zeros((40, 24, 24), dtype=np.uint8)
        ball[3:9, 3:9, 3:9] = 1
        pred = np.roll(ball, 1, axis=2)
        pred[32:36, 15:19, 15:19] = 1
        affine = np.diag([2.0, 0.8, 0.8, 1.0])
        nib.save(nib.Nifti1Image(ball, affine), Path(tmp) / "warm_ref.nii.gz")
        nib.save(nib.Nifti1Image(pred, affine), Path(tmp) / "warm_pred.nii.gz")
        score_case("warm-up", Path(tmp) / "warm_ref.nii.gz", Path(tmp) / "warm_pred.nii.gz", REGIONS)
        print(f"engine warm-up (once per process, excluded below) {time.perf_counter() - t0:.2f}s", flush=True)
        for i, (ref_path, kind) in enumerate(zip(files, kinds, strict=True)):
            img = nib.load(ref_path)
            labels = np.asanyarray(img.dataobj)
            pred_path = Path(tmp) / f"{ref_path.name}"
            nib.save(nib.Nifti1Image(simulate(labels, img.header.get_zooms(), kind), img.affine, img.header), pred_path)
            del labels

            dec_times, eng_times = [], []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                decode(ref_path), decode(pred_path)
                dec_times.append(time.perf_counter() - t0)

                t0 = time.perf_counter()
                rows = score_case(ref_path.name, ref_path, pred_path, REGIONS)
                eng_times.append(time.perf_counter() - t0)
            t_dec.append(min(dec_times))
            t_eng.append(min(eng_times))
            msg = f"[{i + 1}/{len(files)}] {ref_path.name} {kind:16s} decode {t_dec[-1]:6.2f}s engine {t_eng[-1]:6.2f}s"

            if i in seg_idx:
                t0 = time.perf_counter()
                ref_rows = segauge_case(ref_path, pred_path)
                t_seg.append(time.perf_counter() - t0)
                msg += f" segauge {t_seg[-1]:7.1f}s"
                for row in rows:
                    theirs = ref_rows[row["structure"]]
                    for m in COMPARED:
                        if m in theirs and not row["worst_case"]:
                            diffs[m].append(float(row[m]) - float(theirs[m]))
            print(msg, flush=True)
            pred_path.unlink()

    dec, eng = np.mean(t_dec), np.mean(t_eng)
    committed = committed_figures()
    print(f"\nload average {os.getloadavg()[0]:.1f} (1 min) on {os.cpu_count()} cores")
    print(f"{len(files)} cases ({', '.join(sorted(set(kinds)))}); segauge on cases {sorted(seg_idx)}; "
          f"floor and engine: fastest of {args.repeat} per case")
    print(f"decode floor  {dec:8.3f} s/case")
    print(f"engine        {eng:8.3f} s/case   engine/decode = {eng / dec:.2f}x (target <= 1.5x)")
    if committed.keys() >= {"decode", "engine", "ratio"}:
        print(f"committed     decode {committed['decode']:.3f} s/case, engine {committed['engine']:.3f} s/case, "
              f"engine/decode = {committed['ratio']:.2f}x ({RESULTS.name}; its own cases and machine load)")
        print(f"today/committed: engine/decode ratio {eng / dec / committed['ratio']:.2f}, engine s/case "
              f"{eng / committed['engine']:.2f}, decode s/case {dec / committed['decode']:.2f}")
    if seg_n:
        seg, eng_sub = np.mean(t_seg), np.mean([t_eng[i] for i in sorted(seg_idx)])
        print(f"segauge       {seg:8.3f} s/case   segauge/engine = {seg / eng_sub:.1f}x (same {seg_n} cases)")
        print("\nagreement with segauge (engine - segauge; non-worst-case regions):")
        for m, d in diffs.items():
            if d:
                a = np.abs(d)
                print(f"  {m:14s} n={len(d):3d} max|diff| {a.max():.3g}  mean diff {np.mean(d):+.3g}  p95|diff| {np.quantile(a, 0.95):.3g}")


if __name__ == "__main__":
    main()
