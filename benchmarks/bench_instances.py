"""Lesion-wise scoring against panoptica 2.1.7 and brats-evaluation 0.0.10: time per case and structure on whole KiTS23 label maps.

For each case and structure (tumor, cyst): the whole reference label map as decoded, a SIMULATED
prediction (tests/support/lesion_cases.py: missed, split, bridged and added lesions), both as full-size
boolean arrays; then, best of ``--repeat`` on one thread each, in this process:
``score_lesions`` (table and case scores) under the ``panoptica`` profile against panoptica's
evaluator with the same rule and per-instance metrics (26-connected components, naive IoU >= 0.5;
Dice, IoU, HD, HD95, ASSD, NSD; no global metrics), and under the ``brats`` profile against
brats-evaluation's METs evaluator (bipartite Dice, Dice/NSD/HD95 per lesion, and its global
Dice/NSD/HD95, which segbench's case scores already hold) on the "et" group. Outputs agree (tests/scoring/test_instances.py).

    envs/lesion-reference/bin/python benchmarks/bench_instances.py > benchmarks/results_bench_instances.txt
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

import brats_evaluation as brats  # noqa: E402
import numpy as np  # noqa: E402
import panoptica as pan  # noqa: E402
from panoptica.utils.edge_case_handling import EdgeCaseHandler, EdgeCaseResult, MetricZeroTPEdgeCaseHandling  # noqa: E402

from lesion_cases import STRUCTURES, load_case, simulate_lesions  # noqa: E402
from segbench.scoring.instances import score_lesions  # noqa: E402


def best(fn, repeat: int) -> float:
    """Shortest of ``repeat`` wall times of ``fn()`` (s); what ``fn`` prints (the packages' banners and notices) is dropped,
    so that the output is the table alone."""
    times = []
    for _ in range(repeat):
        with contextlib.redirect_stdout(io.StringIO()):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["case_00008", "case_00021", "case_00028", "case_00037", "case_00050"])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    metrics = [pan.Metric.DSC, pan.Metric.IOU, pan.Metric.HD, pan.Metric.HD95, pan.Metric.ASSD, pan.Metric.NSD]
    panoptica = pan.Panoptica_Evaluator(
        expected_input=pan.InputType.SEMANTIC,
        instance_approximator=pan.ConnectedComponentsInstanceApproximator(),
        instance_matcher=pan.NaiveThresholdMatching(pan.Metric.IOU, 0.5),
        instance_metrics=metrics,
        global_metrics=[],
        edge_case_handler=EdgeCaseHandler({m: MetricZeroTPEdgeCaseHandling(default_result=EdgeCaseResult.NAN) for m in metrics}),
    )
    with contextlib.redirect_stdout(io.StringIO()):  # its notice on the duplicate labels of the BraTS groups
        brats_eval = pan.Panoptica_Evaluator.load_from_config(brats.config_path("mets"))
    print(
        f"panoptica {pan.__version__ if hasattr(pan, '__version__') else '2.1.7'}, brats-evaluation 0.0.10, numpy {np.__version__}; "
        f"best of {args.repeat}, one thread, whole label maps"
    )
    print(
        f"{'case':<11} {'structure':<9} {'shape':<16} {'lesions':>7} | {'segbench':>8} {'panoptica':>9} {'ratio':>6} |"
        f" {'segbench':>8} {'brats':>7} {'ratio':>6}"
    )
    ratios_p, ratios_b = [], []
    for case in args.cases:
        labels, spacing = load_case(ROOT / "data" / "kits23" / "labels", case, margin=10**6)
        for structure, label in STRUCTURES.items():
            ref, pred = simulate_lesions(labels, label, spacing)
            if not ref.any():
                continue
            ref_u8, pred_u8 = ref.astype(np.uint8), pred.astype(np.uint8)
            n_ref = len(score_lesions(ref, pred, spacing, "panoptica")[0].query("status != 'FP'"))
            ours_p = best(lambda: score_lesions(ref, pred, spacing, "panoptica"), args.repeat)
            theirs_p = best(lambda: panoptica.evaluate(pred_u8, ref_u8, voxelspacing=spacing, verbose=False), args.repeat)
            ours_b = best(lambda: score_lesions(ref, pred, spacing, "brats"), args.repeat)
            theirs_b = best(lambda: brats_eval.evaluate(pred_u8 * 3, ref_u8 * 3, voxelspacing=spacing, skip_groups=["wt", "tc", "rc"]), args.repeat)
            ratios_p.append(theirs_p / ours_p)
            ratios_b.append(theirs_b / ours_b)
            print(
                f"{case:<11} {structure:<9} {str(ref.shape):<16} {n_ref:>7} | {ours_p:>7.3f}s {theirs_p:>8.3f}s {ratios_p[-1]:>5.1f}x |"
                f" {ours_b:>7.3f}s {theirs_b:>6.3f}s {ratios_b[-1]:>5.1f}x"
            )
    geo = lambda r: float(np.exp(np.mean(np.log(r))))  # noqa: E731
    print(f"geometric mean ratio: panoptica {geo(ratios_p):.1f}x (min {min(ratios_p):.1f}x), brats-evaluation {geo(ratios_b):.1f}x (min {min(ratios_b):.1f}x)")


if __name__ == "__main__":
    main()
