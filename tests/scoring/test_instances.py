"""Lesion-wise scoring (segbench.scoring.instances): hand-built cases with known matches per rule, and
agreement with panoptica 2.1.7 and brats-evaluation 0.0.10 on real KiTS23 tumors and cysts with
SIMULATED predictions (tests/support/lesion_cases.py: a missed, a split, a bridged and an added lesion).

Agreement tolerance: counts, matches and stratum recalls exactly; every score and volume within a
relative 1e-9 (observed: equal to the last bit or to a few ulp). The packages are in the
extra ``lesions``, in a venv of their own (their pins would downgrade numpy and pandas); without them the
agreement tests are skipped with the reason, and CI runs them there (.ci/run).
"""

from __future__ import annotations

import importlib
import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import ndimage

from lesion_cases import STRUCTURES, load_case, simulate_lesions
from segbench.scoring.instances import (
    LESION_PROFILES,
    case_scores,
    check_pair,
    instance_table,
    instance_tables,
    label_components,
    match_bipartite,
    match_dilation,
    match_merge,
    match_naive,
    overlap_table,
    panoptica_surface_distances,
    score_lesions,
)

RTOL = 1e-9


def _reference_package(module: str) -> object:
    """A reference package (the ``lesions`` extra, in a venv of its own: README, "Developing"); the agreement tests
    skip without it, unless SEGBENCH_LESION_REFERENCE=required (CI), where its absence fails them."""
    if os.environ.get("SEGBENCH_LESION_REFERENCE") == "required":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} (the 'lesions' extra) is not installed: see the README's developer section")


CASES = ("case_00021", "case_00028", "case_00008")  # 1 tumor and 3, 5, 8 cysts each


def _labels(*boxes: tuple[slice, ...], shape: tuple[int, int, int] = (24, 24, 24)) -> np.ndarray:
    out = np.zeros(shape, dtype=np.int32)
    for i, box in enumerate(boxes, start=1):
        out[box] = i
    return out


def _overlap(ref: np.ndarray, pred: np.ndarray):
    return overlap_table(ref, int(ref.max()), pred, int(pred.max()))


# ---- hand-built cases: one per rule, with the expected matches ----


def test_components_follow_connectivity():
    mask = np.zeros((5, 5, 5), dtype=bool)
    mask[0, 0, 0] = mask[1, 1, 1] = True  # corner neighbours
    mask[0, 3, 4] = mask[1, 4, 4] = True  # edge neighbours
    assert [label_components(mask, c)[1] for c in (6, 18, 26)] == [4, 3, 2]
    with pytest.raises(ValueError, match="connectivity must be one of"):
        label_components(mask, 8)


def _random_masks(n: int, seed: int) -> list[np.ndarray]:
    """Random boolean masks of random small shapes and fill, every third a strided (non-contiguous) view."""
    rng = np.random.default_rng(seed)
    masks = [rng.random(tuple(rng.integers(1, 12, 3))) < rng.uniform(0.05, 0.7) for _ in range(n)]
    return [m[::2, :, ::-1] if i % 3 == 0 else m for i, m in enumerate(masks)]


def test_components_and_boxes_equal_scipys():
    """The run labeller's labels (their numbering included) are scipy's ``label``'s, and the overlap
    table's boxes its ``find_objects``'."""
    for mask in _random_masks(300, seed=0):
        for connectivity, rank in ((6, 1), (18, 2), (26, 3)):
            labels, n = label_components(mask, connectivity)
            expected, n_expected = ndimage.label(mask, structure=ndimage.generate_binary_structure(3, rank))
            assert n == n_expected and np.array_equal(labels, expected)
        other, n_other = label_components(np.roll(mask, 1, axis=2), 6)
        ov = overlap_table(labels, n, other, n_other)
        for box, found in ((ov.ref_box[1:], ndimage.find_objects(labels)), (ov.pred_box[1:], ndimage.find_objects(other))):
            assert [tuple(b) for b in box.tolist()] == [(*(s.start for s in f), *(s.stop for s in f)) for f in found]


def test_surface_distances_are_a_distance_transforms_of_the_other_edge():
    """Each edge voxel's distance is what scipy's distance transform of the other mask's edge gives
    (panoptica's computation), to the last bits (a tie between two nearest voxels may round apart)."""
    masks = _random_masks(200, seed=1)
    spacings = [(1.0, 1.0, 1.0), (3.0, 0.81640625, 0.81640625), (0.7, 1.3, 2.9), (0.1, 0.7, 5.0)]
    for i, (pred, ref) in enumerate(zip(masks[::2], masks[1::2])):
        ref = np.resize(ref, pred.shape)
        if not (pred.any() and ref.any()):
            continue
        spacing = spacings[i % len(spacings)]
        edges = [m & ~ndimage.binary_erosion(m) for m in (pred, ref)]
        sd = panoptica_surface_distances(pred, ref, spacing)
        for d, (src, dst) in ((sd.d_pg, edges), (sd.d_gp, edges[::-1])):
            np.testing.assert_allclose(d, ndimage.distance_transform_edt(~dst, sampling=spacing)[src], rtol=1e-14, atol=0)


def test_naive_matching_one_to_one_and_many_to_one():
    # reference 1 (8x8x8) split by the prediction into two halves (IoU 0.5 each), reference 2 predicted at IoU 1/3
    ref = _labels(np.s_[2:10, 2:10, 2:10], np.s_[14:18, 14:18, 10:22])
    pred = _labels(np.s_[2:10, 2:10, 2:6], np.s_[2:10, 2:10, 6:10], np.s_[14:18, 14:18, 18:22], np.s_[20:22, 2:4, 2:4])
    ov = _overlap(ref, pred)
    m = match_naive(ov, "iou", 0.5)
    assert m.preds == ((1,), ()) and m.unmatched == (2, 3, 4)  # equal scores: the lower prediction id first
    m = match_naive(ov, "iou", 0.5, many_to_one=True)
    assert m.preds == ((1, 2), ()) and m.unmatched == (3, 4)
    assert match_naive(ov, "iou", 0.5, strict=True).preds == ((), ())
    assert match_naive(ov, "iou", 0.25).preds == ((1,), (3,))


def test_bipartite_matching_maximises_the_total_not_the_best_pair():
    # prediction 1 overlaps both references (Dice 2/3 and 1/3), prediction 2 only reference 1 (Dice 4/7): greedy takes the
    # best pair and leaves reference 2 unmatched (total 2/3); the optimum pairs 1 with 2 and 2 with 1 (total 0.90)
    ref = _labels(np.s_[0:10, 0:10, 0:10], np.s_[0:10, 0:10, 10:14])
    pred = _labels(np.s_[0:10, 0:10, 4:12], np.s_[0:10, 0:10, 0:4])
    ov = _overlap(ref, pred)
    assert match_naive(ov, "dice", 1e-6).preds == ((1,), ())
    m = match_bipartite(ov, "dice", 1e-6)
    assert m.preds == ((2,), (1,)) and m.unmatched == ()
    assert match_bipartite(ov, "dice", 0.5).preds == ((1,), ())  # below the threshold a pair is never matched


def test_maximize_merge_merges_a_split_lesion_back():
    ref = _labels(np.s_[2:10, 2:10, 2:12])
    pred = _labels(np.s_[2:10, 2:10, 2:8], np.s_[2:10, 2:10, 9:12], np.s_[2:10, 2:10, 12:16], np.s_[20:22, 20:22, 20:22])
    ov = _overlap(ref, pred)
    m = match_merge(ov, "iou", 0.5)
    # 1 (IoU 0.6) matches; adding 2 raises the union's IoU to 0.9; adding 3 (outside the lesion but touching it) lowers it
    assert m.preds == ((1, 2),) and m.unmatched == (3, 4)
    table = instance_table(ref > 0, pred > 0, (1.0, 1.0, 1.0), "panoptica")
    # as masks, pieces 2 and 3 touch: one 26-connected prediction (IoU 0.3, a FP under naive IoU >= 0.5), piece 1 matches alone
    assert list(table.status) == ["TP", "FP", "FP"] and list(table.prediction_ids) == ["1", "2", "3"]


def test_dilation_rule_merges_close_references_and_claims_nearby_predictions():
    ref = _labels(np.s_[4:8, 4:8, 4:8], np.s_[4:8, 4:8, 11:15], np.s_[16:20, 16:20, 16:20])  # 1 and 2 are 3 voxels apart
    pred = np.zeros(ref.shape, dtype=np.int32)
    pred[4:8, 4:8, 15:17] = 1  # no overlap, but within 3 dilations of reference 2
    pred[14:16, 14:16, 14:16] = 2  # touches reference 3's dilation
    pred[0:2, 20:22, 0:2] = 3  # far from everything
    merged, n_ref, m = match_dilation(ref > 0, pred, 3, iterations=3)
    assert n_ref == 2 and set(np.unique(merged[ref == 1])) == set(np.unique(merged[ref == 2])) == {1}
    assert m.preds == ((1,), (2,)) and m.unmatched == (3,)
    one_pred = np.zeros(ref.shape, dtype=np.int32)
    one_pred[4:8, 4:8, 8:11] = 1  # fills the gap between references 1 and 2: with dilation 1 they stay two lesions, both claim it
    _, n_ref, m = match_dilation(ref > 0, one_pred, 1, iterations=1)
    assert n_ref == 3 and m.preds == ((1,), (1,), ()) and m.unmatched == ()


def test_brats2023_lesionwise_scores_penalise_misses_and_false_positives():
    ref = _labels(np.s_[2:8, 2:8, 2:8], np.s_[14:20, 14:20, 14:20], np.s_[20:22, 0:5, 0:5])  # the last: 50 mm^3, not above the floor
    pred = _labels(np.s_[2:8, 2:8, 2:8], np.s_[20:24, 20:24, 0:4])
    table, scores = score_lesions(ref > 0, pred > 0, (1.0, 1.0, 1.0), "brats2023")
    assert list(table.status) == ["TP", "FN", "FN", "FP"]
    assert scores["lesion_dice"] == pytest.approx((1.0 + 0.0) / 3)  # two lesions above 50 mm^3 and one false positive
    assert scores["lesion_hd95"] == pytest.approx((0.0 + 374.0 + 374.0) / 3)
    _, empty = score_lesions(np.zeros((4, 4, 4), bool), np.zeros((4, 4, 4), bool), (1.0, 1.0, 1.0), "brats2023")
    assert (empty["lesion_dice"], empty["lesion_hd95"]) == (1.0, 0.0) and math.isnan(empty["rq"])


def test_case_scores_counts_volumes_and_strata():
    ref = _labels(np.s_[0:10, 0:10, 0:10], np.s_[14:16, 14:16, 14:16], np.s_[20:24, 0:4, 0:4])
    pred = _labels(np.s_[0:10, 0:10, 0:9], np.s_[20:24, 20:24, 20:24])
    table, s = score_lesions(ref > 0, pred > 0, (2.0, 1.0, 1.0), "panoptica", strata_ml=(0.05, 1.0))
    assert (s["tp"], s["fp"], s["fn"]) == (1, 1, 2)
    assert s["f1"] == s["rq"] == pytest.approx(1 / (1 + 0.5 + 1.0))
    assert s["pq_iou"] == pytest.approx(0.9 * s["rq"])
    assert s["fn_volume_ml"] == pytest.approx((8 + 64) * 2.0 / 1000) and s["fp_volume_ml"] == pytest.approx(64 * 2.0 / 1000)
    assert (s["recall_lt_0.05ml"], s["recall_0.05_1ml"], s["recall_ge_1ml"]) == (0.0, 0.0, 1.0)
    assert list(table.columns) == [
        "status",
        "reference_id",
        "prediction_ids",
        "reference_volume_ml",
        "prediction_volume_ml",
        "dice",
        "iou",
        "hd",
        "hd95",
        "assd",
        "masd",
        "nsd",
    ]


@pytest.mark.parametrize(
    ("ref", "pred", "spacing", "message"),
    [
        (np.zeros((4, 4, 4)), np.zeros((4, 4, 5)), (1, 1, 1), r"reference shape \(4, 4, 4\) != prediction shape \(4, 4, 5\)"),
        (np.zeros((4, 4)), np.zeros((4, 4)), (1, 1, 1), r"reference mask: expected 3 dimensions"),
        (np.zeros((4, 4, 4)), np.full((4, 4, 4), 2), (1, 1, 1), r"prediction mask is not binary: values \[2\]"),
        (np.zeros((4, 4, 4)), np.zeros((4, 4, 4)), None, r"spacing must be 3 positive finite"),
        (np.zeros((4, 4, 4)), np.zeros((4, 4, 4)), (1, 0, 1), r"spacing must be 3 positive finite"),
    ],
)
def test_inputs_are_checked(ref, pred, spacing, message):
    with pytest.raises(ValueError, match=message):
        check_pair(ref, pred, spacing)


# ---- agreement with the packages on real KiTS23 lesions, SIMULATED predictions ----


@pytest.fixture(scope="module")
def kits_cases(kits_labels: Path) -> dict[str, tuple[np.ndarray, tuple[float, float, float]]]:
    return {case: load_case(kits_labels, case) for case in CASES}


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=RTOL, abs_tol=1e-12)


PANOPTICA_RULES = {  # lesion profile overrides -> panoptica matcher
    "naive": dict(matcher="naive", matching_metric="iou", matching_threshold=0.5),
    "naive_many_to_one": dict(matcher="naive", matching_metric="iou", matching_threshold=0.1, many_to_one=True),
    "bipartite": dict(matcher="bipartite", matching_metric="dice", matching_threshold=1e-6),
    "merge": dict(matcher="merge", matching_metric="iou", matching_threshold=0.3),
}


@pytest.mark.parametrize("rule", sorted(PANOPTICA_RULES))
@pytest.mark.parametrize("structure", sorted(STRUCTURES))
@pytest.mark.parametrize("case", CASES)
def test_panoptica_agreement_on_simulated_kits_lesions(kits_cases, case, structure, rule):
    """SIMULATED prediction of a real KiTS23 structure: every count, score and per-lesion value as panoptica's."""
    pan = _reference_package("panoptica")
    from dataclasses import replace

    from panoptica.instance_matcher import MaximizeMergeMatching
    from panoptica.utils.edge_case_handling import EdgeCaseHandler, EdgeCaseResult, MetricZeroTPEdgeCaseHandling

    labels, spacing = kits_cases[case]
    ref, pred = simulate_lesions(labels, STRUCTURES[structure], spacing)
    settings = PANOPTICA_RULES[rule]
    profile = replace(LESION_PROFILES["panoptica"], **settings)
    metric = {"iou": pan.Metric.IOU, "dice": pan.Metric.DSC}[settings["matching_metric"]]
    matcher = {
        "naive": lambda: pan.NaiveThresholdMatching(metric, settings["matching_threshold"], allow_many_to_one=settings.get("many_to_one", False)),
        "bipartite": lambda: pan.MaxBipartiteMatching(metric, settings["matching_threshold"]),
        "merge": lambda: MaximizeMergeMatching(metric, settings["matching_threshold"]),
    }[settings["matcher"]]()
    metrics = [pan.Metric.DSC, pan.Metric.IOU, pan.Metric.HD, pan.Metric.HD95, pan.Metric.ASSD, pan.Metric.NSD]
    evaluator = pan.Panoptica_Evaluator(
        expected_input=pan.InputType.SEMANTIC,
        instance_approximator=pan.ConnectedComponentsInstanceApproximator(),
        instance_matcher=matcher,
        instance_metrics=metrics,
        global_metrics=[],
        # panoptica's own zero-TP values for Dice and IoU (0, NaN without instances: PQ is then 0 as ours), NaN for the distances
        edge_case_handler=EdgeCaseHandler(
            {
                m: MetricZeroTPEdgeCaseHandling(
                    no_instances_result=EdgeCaseResult.NAN,
                    default_result=(EdgeCaseResult.ZERO if m in (pan.Metric.DSC, pan.Metric.IOU) else EdgeCaseResult.NAN),
                )
                for m in metrics
            }
        ),
    )
    result = evaluator.evaluate(pred.astype(np.uint8), ref.astype(np.uint8), voxelspacing=spacing, verbose=False)["ungrouped"]
    theirs = result.to_dict(True)
    strata_mm3 = [50.0, 1000.0]
    table, ours = score_lesions(ref, pred, spacing, profile, strata_ml=[v / 1000 for v in strata_mm3])

    assert (ours["tp"], ours["fp"], ours["fn"]) == (theirs["tp"], theirs["fp"], theirs["fn"])
    assert ours["n_reference"] == theirs["n_ref_instances"]
    pairs = {
        "rq": "rq",
        "sq_dice": "sq_dsc",
        "sq_iou": "sq",
        "sq_hd": "sq_hd",
        "sq_hd95": "sq_hd95",
        "sq_masd": "sq_assd",
        "sq_nsd": "sq_nsd",
        "pq_iou": "pq",
        "pq_dice": "pq_dsc",
        "precision": "prec",
        "recall": "rec",
    }
    for ours_key, their_key in pairs.items():
        if ours_key.startswith("sq_") and ours["tp"] == 0:  # SQ without a matched lesion: NaN here, panoptica's zero-TP value there
            continue
        assert _close(ours[ours_key], float(theirs[their_key])), (ours_key, ours[ours_key], theirs[their_key])
    # per reference lesion: matched first, then missed, each ordered by volume (instance ids differ: cc3d numbers components its own way)
    rows = pd.DataFrame(theirs["reference_instances"]).sort_values(["is_matched", "volume"], ascending=[False, True])
    mine = table[table.status != "FP"].assign(m=lambda t: t.status == "TP").sort_values(["m", "reference_volume_ml"], ascending=[False, True])
    assert len(rows) == len(mine)
    assert list(rows.is_matched == 1) == list(mine.m)
    for (_, r), (_, m) in zip(rows.iterrows(), mine.iterrows(), strict=True):
        assert _close(m.reference_volume_ml * 1000, r.volume)
        if r.is_matched:
            for ours_key, their_key in {"dice": "sq_dsc", "iou": "sq", "hd": "sq_hd", "hd95": "sq_hd95", "masd": "sq_assd", "nsd": "sq_nsd"}.items():
                assert _close(m[ours_key], r[their_key]), (ours_key, m[ours_key], r[their_key])
    recall = result.recall_by_volume(strata_mm3)
    for ours_key, their_key in zip([k for k in ours if k.startswith("recall_")], sorted(recall), strict=True):
        assert _close(ours[ours_key], recall[their_key]), (ours_key, their_key)
    assert _close(ours["fn_volume_ml"] * 1000, float(sum(rows.volume[rows.is_matched == 0])))


@pytest.mark.parametrize("structure", sorted(STRUCTURES))
@pytest.mark.parametrize("case", CASES)
def test_brats_agreement_on_simulated_kits_lesions(kits_cases, case, structure, tmp_path):
    """SIMULATED prediction of a real KiTS23 structure through brats-evaluation (its bundled METs config and
    ``parse_mets_results``): lesion-wise Dice/HD95 and detection counts as ours."""
    brats = _reference_package("brats_evaluation")
    from panoptica import Panoptica_Evaluator

    labels, spacing = kits_cases[case]
    ref, pred = simulate_lesions(labels, STRUCTURES[structure], spacing)
    evaluator = Panoptica_Evaluator.load_from_config(brats.config_path("mets"))
    # evaluate_single_exam's result, from arrays with the spacing: given file paths, panoptica 2.1.7 reads them with
    # SimpleITK (z, y, x arrays) but keeps its (x, y, z) spacing, which reverses the axes of every distance on KiTS'
    # anisotropic voxels (BraTS' 1 mm isotropic data never shows it); label 3 is BraTS' enhancing tumor, the "et" group
    groups = evaluator.evaluate(pred.astype(np.uint8) * 3, ref.astype(np.uint8) * 3, voxelspacing=spacing, skip_groups=["wt", "tc", "rc"])
    exam = {k: r.to_dict(True) for k, r in groups.items()} | {"subject_name": case}
    (tmp_path / "summary.json").write_text(json.dumps({"metrics": [exam], "missings": []}, default=float))
    brats.parse_mets_results(str(tmp_path / "summary.json"), 20.0, 0.1, str(tmp_path / "mets.csv"))
    theirs = pd.read_csv(tmp_path / "mets.csv").iloc[0]

    profile = LESION_PROFILES["brats"]
    _, ours = score_lesions(ref, pred, spacing, profile)
    assert (ours["tp"], ours["fp"], ours["fn"]) == tuple(int(theirs[f"all_instance_{k}_et"]) for k in ("tp", "fp", "fn"))
    for ours_key, their_key in {
        "lesion_dice": "lesionwise_dsc_mean_et",
        "lesion_hd95": "lesionwise_hd95_mean_et",
        "f1": "all_instance_f1_et",
        "precision": "all_instance_prec_et",
        "recall": "all_instance_rec_et",
    }.items():
        assert _close(ours[ours_key], float(theirs[their_key])), (ours_key, ours[ours_key], theirs[their_key])


def test_case_scores_accept_a_profile_name():
    ref = _labels(np.s_[2:8, 2:8, 2:8]) > 0
    table = instance_table(ref, ref, (1.0, 1.0, 1.0), "brats")
    assert case_scores(table, "brats")["lesion_dice"] == 1.0
    with pytest.raises(ValueError, match="unknown lesion profile 'nope'; known: "):
        case_scores(table, "nope")


@pytest.mark.parametrize("structure", sorted(STRUCTURES))
@pytest.mark.parametrize("case", CASES)
def test_profiles_sharing_instances_and_surfaces_give_each_profiles_own_table(kits_cases, case, structure):
    """instance_tables (the score stage's call: every lesion profile at once, sharing components, overlaps and the
    surface distances of pairs matched alike) equals each profile's own instance_table, on SIMULATED predictions that
    miss, split, merge and add lesions, whole and cut through by the array's edge."""
    labels, spacing = kits_cases[case]
    ref, pred = simulate_lesions(labels, STRUCTURES[structure], spacing)
    cut = tuple(slice(n // 3, None) for n in ref.shape)
    for r, p in ((ref, pred), (ref[cut], pred[cut])):
        shared = instance_tables(r, p, spacing, list(LESION_PROFILES))
        for name, table in zip(LESION_PROFILES, shared, strict=True):
            pd.testing.assert_frame_equal(table, instance_table(r, p, spacing, name), obj=name)
    assert instance_tables(ref, pred, spacing, []) == []  # no profile asked: no table, not an error
