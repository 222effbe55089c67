"""The interactive NSD is the challenge's: DeepMind's ``compute_surface_dice_at_tolerance`` at 2 mm, per class, on the
bundle's three real scans (CT, MR, CT DICOM series) turned into challenge cases.

The references are TotalSegmentator's outputs (a PSEUDO-REFERENCE); the predictions are SIMULATED from them (each class
shifted, grown or shrunk by a voxel or two, so surfaces differ at and around the 2 mm tolerance). The challenge's
script (CVPR25_iter_eval.py) calls surface-distance's functions with the reference first and the npz spacing.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage
from surface_distance import compute_surface_dice_at_tolerance, compute_surface_distances

from repo_paths import ROOT
from segbench.interactive import cases, protocol

EXAMPLE = ROOT / "data" / "totalseg_example"
ORGANS = {"spleen": 1, "kidney_right": 2, "kidney_left": 3, "liver": 5, "stomach": 6}  # TotalSegmentator v2 ids
SOURCES = [
    ("ct", EXAMPLE / "ct_sm.nii.gz", EXAMPLE / "seg_total.nii.gz"),
    ("mr", EXAMPLE / "mr_sm.nii.gz", EXAMPLE / "seg_mr.nii.gz"),
    ("ct_dicom", EXAMPLE / "ct_dicom", EXAMPLE / "seg_dicom.nii.gz"),
]


@pytest.fixture(scope="module")
def bundle_cases(tmp_path_factory: pytest.TempPathFactory) -> list[cases.Case]:
    folder = tmp_path_factory.mktemp("nsd") / "cases"
    cases.convert(SOURCES, ORGANS, folder, reference="pseudo", note="TotalSegmentator outputs, not manual annotations")
    return [cases.load_case(c, folder / "imgs" / f"{c}.npz", folder / "gts" / f"{c}.npz") for c, _, _ in SOURCES]


def _simulated(gts: np.ndarray, n_classes: int) -> np.ndarray:
    """SIMULATED prediction: class c moved by c voxels along x; odd classes also grown, even ones shrunk, by one voxel."""
    segs = np.zeros_like(gts)
    for c in range(1, n_classes + 1):
        mask = np.roll(gts == c, c, axis=2)
        mask = ndimage.binary_dilation(mask) if c % 2 else ndimage.binary_erosion(mask)
        segs[mask & (segs == 0)] = c
    return segs


def test_nsd_equals_deepminds_surface_dice_on_the_bundles_scans(bundle_cases: list[cases.Case]) -> None:
    compared = 0
    for case in bundle_cases:
        segs = _simulated(case.gts, case.n_classes)
        _, nsd = protocol.class_scores(segs, case.gts, case.n_classes, case.spacing)
        assert nsd is not None, case.case_id  # mean Dice above 0.2
        for c in range(1, case.n_classes + 1):
            distances = compute_surface_distances(case.gts == c, segs == c, np.asarray(case.spacing, dtype=float))
            expected = compute_surface_dice_at_tolerance(distances, protocol.NSD_TOLERANCE_MM)
            assert nsd[c - 1] == pytest.approx(expected, abs=1e-12, rel=0), (case.case_id, c)
            compared += 1
    assert compared == 13  # ct and mr: 5 organs each; ct_dicom: spleen, liver, stomach


def test_the_engines_nsd_stays_selectable_and_differs(bundle_cases: list[cases.Case]) -> None:
    """``nsd_profile=segauge`` is segbench's engine NSD (marching-cubes surfaces): another number on the same masks."""
    case = bundle_cases[0]
    segs = _simulated(case.gts, case.n_classes)
    _, challenge = protocol.class_scores(segs, case.gts, case.n_classes, case.spacing)
    _, engine = protocol.class_scores(segs, case.gts, case.n_classes, case.spacing, nsd_profile="segauge")
    assert challenge is not None and engine is not None
    assert max(abs(a - b) for a, b in zip(challenge, engine, strict=True)) > 0.01
