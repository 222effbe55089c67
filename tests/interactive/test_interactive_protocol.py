"""The CVPR 2025 interactive protocol's rules on hand-built volumes (docs/interactive.md).

Every expected click, box and area below is derived by hand in the comments; the one number taken
from numpy is the seed-42 draw among ties, which is the challenge's own
``np.random.seed(42); np.random.choice(n)`` and is checked to be that.
"""

from __future__ import annotations

import numpy as np
import pytest

from segbench.interactive import protocol


def test_seed_42_draw_is_the_challenges_global_draw() -> None:
    for n in (1, 3, 4, 8, 1000):
        np.random.seed(42)
        expected = np.random.choice(n)
        values = np.zeros((1, 1, n))
        assert protocol.draw_among_maxima(values) == (0, 0, expected)
    assert [np.random.RandomState(42).choice(n) for n in (3, 4, 8)] == [2, 2, 6]


def test_tied_maxima_drawn_with_seed_42() -> None:
    # a bar of 4 voxels along x: each is 1 voxel from a non-bar voxel, so all 4 tie at EDT 1;
    # np.argwhere lists them (1,1,1), (1,1,2), (1,1,3), (1,1,4); the seed-42 draw among 4 is index 2
    gts = np.zeros((3, 3, 6), np.uint8)
    gts[1, 1, 1:5] = 1
    click = protocol.click_for_class(np.zeros_like(gts), gts, 1)
    assert click == protocol.Click("fg", (1, 1, 3))


def test_unique_maximum_is_the_centre_of_a_cube() -> None:
    # a 3x3x3 cube: its centre is 2 voxels from the outside, every other voxel 1: one maximum
    gts = np.zeros((7, 7, 7), np.uint8)
    gts[2:5, 3:6, 1:4] = 1
    assert protocol.click_for_class(np.zeros_like(gts), gts, 1) == protocol.Click("fg", (3, 4, 2))


def test_largest_error_component_and_background_click() -> None:
    gts = np.zeros((6, 8, 8), np.uint8)
    gts[0:3, 0:3, 0:3] = 1
    segs = gts.copy()
    segs[0, 0, 0] = 0  # a 1-voxel under-segmentation
    segs[3:6, 5:8, 5:8] = 1  # a 27-voxel over-segmentation: the largest error, centre (4, 6, 6)
    assert protocol.click_for_class(segs, gts, 1) == protocol.Click("bg", (4, 6, 6))


def test_components_are_26_connected() -> None:
    # two voxels touching only at a corner are one component (26-connectivity): 2 voxels beat a
    # single voxel elsewhere; both tie at EDT 1, argwhere order (0,0,0), (1,1,1); seed-42 draw among 2
    gts = np.zeros((5, 5, 5), np.uint8)
    gts[0, 0, 0] = gts[1, 1, 1] = gts[4, 4, 4] = 1
    np.random.seed(42)
    index = np.random.choice(2)
    assert protocol.click_for_class(np.zeros_like(gts), gts, 1) == protocol.Click("fg", [(0, 0, 0), (1, 1, 1)][index])


def test_class_without_error_gets_no_click() -> None:
    gts = np.zeros((4, 4, 4), np.uint8)
    gts[0:2, 0:2, 0:2] = 1
    gts[2:4, 2:4, 2:4] = 2
    segs = gts.copy()
    segs[2:4, 2:4, 2:4] = 0
    clicks = protocol.step_clicks(segs, gts, 2)
    assert clicks[0] is None
    assert clicks[1] is not None and clicks[1].kind == "fg"


def test_edt_downsampled_above_the_voxel_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # an 8x8x8 cube: padding max(1, int(0.25 * 8)) = 2, padded box 12^3 = 1728 voxels. Full
    # resolution: the 2x2x2 centre voxels are 4 from the outside. With the limit below 1728 the EDT
    # is taken on the 2x block maximum (6^3: zero border, the cube at 1..4, centre blocks 2..3 at
    # distance 2) and repeated back: maximum 2 on padded 4..7 = cube coordinates 2..5 per axis
    gts = np.zeros((10, 10, 10), np.uint8)
    gts[1:9, 1:9, 1:9] = 1
    edt_full, corner = protocol.component_edt(gts.astype(bool))
    assert corner == (1, 1, 1) and edt_full.max() == 4.0
    monkeypatch.setattr(protocol, "EDT_MAX_VOXELS", 1000)
    edt, corner = protocol.component_edt(gts.astype(bool))
    assert corner == (1, 1, 1) and edt.max() == 2.0
    assert {tuple(p) for p in np.argwhere(edt == 2.0)} == {(z, y, x) for z in range(2, 6) for y in range(2, 6) for x in range(2, 6)}


def test_box_rule() -> None:
    # class voxels on slices 2, 3, 7: distinct z [2, 3, 7], middle index 1 -> z_mid 3; on slice 3
    # rows 100..120 and cols 50..60; H = 512, W = 256: shift s widens y by int(2s), x by int(s)
    gts = np.zeros((10, 512, 256), np.uint8)
    gts[2, 10, 10] = gts[7, 500, 250] = 1
    gts[3, 100:121, 50:61] = 1
    s = 4
    box = protocol.box_of_mask(gts == 1, s)
    assert box == {"z_min": 2, "z_max": 7, "z_mid": 3, "z_mid_y_min": 92, "z_mid_y_max": 128, "z_mid_x_min": 46, "z_mid_x_max": 64}
    # clipped at the image's edges
    edge = np.zeros((1, 512, 256), np.uint8)
    edge[0, 0:3, 254:256] = 1
    assert protocol.box_of_mask(edge == 1, 5) | {} == {
        "z_min": 0,
        "z_max": 0,
        "z_mid": 0,
        "z_mid_y_min": 0,
        "z_mid_y_max": 12,
        "z_mid_x_min": 249,
        "z_mid_x_max": 255,
    }


def test_box_shifts_from_one_seeded_generator() -> None:
    gts = np.zeros((2, 256, 256), np.uint8)
    gts[0, 100:110, 100:110] = 1
    gts[1, 50:60, 50:60] = 2
    boxes, shifts = protocol.boxes_of_labels(gts, np.random.RandomState(2025))
    np.random.seed(2025)  # the challenge's get_boxes.py: one global seed, one draw per class in order
    assert shifts == [int(np.random.randint(0, 6, 1)[0]) for _ in range(2)]
    assert boxes[0]["z_mid_x_min"] == 100 - shifts[0] and boxes[1]["z_mid_y_max"] == 59 + shifts[1]


def test_auc_over_the_click_steps_only() -> None:
    # steps 2..6 = 1, 0.5, 0.5, 1, 1 at x = 0..4: (1+.5)/2 + (.5+.5)/2 + (.5+1)/2 + (1+1)/2 = 3.0
    assert protocol.auc([0.9, 1.0, 0.5, 0.5, 1.0, 1.0]) == 3.0
    assert protocol.auc([0.0, 1, 1, 1, 1, 1]) == 4.0


def test_nsd_only_above_dice_0_2() -> None:
    gts = np.zeros((6, 6, 6), np.uint8)
    gts[1:5, 1:5, 1:5] = 1
    dice, nsd = protocol.class_scores(gts, gts, 1, (1.0, 1.0, 1.0))
    assert dice == [1.0] and nsd == [1.0]
    segs = np.zeros_like(gts)
    segs[1, 1, 1:3] = 1  # Dice 2*2/(64+2) = 0.06 <= 0.2: NSD not computed
    dice, nsd = protocol.class_scores(segs, gts, 1, (1.0, 1.0, 1.0))
    assert dice == [pytest.approx(4 / 66)] and nsd is None


def test_auc_under_each_protocol_version() -> None:
    values = [0.9, 1.0, 0.5, 0.5, 1.0, 1.0]
    # 2025-03-25: the click steps only, as above: 3.0; 2025-03-04: the box step too at x = 0: (0.9+1)/2 + 3.0 = 3.95
    assert protocol.auc(values, "2025-03-25") == 3.0
    assert protocol.auc(values, "2025-03-04") == pytest.approx(3.95)
    # a case without boxes had no box step in the older rule either: its 5 clicks, 3.0
    assert protocol.auc(values, "2025-03-04", box_step=False) == 3.0
    assert protocol.Scoring("2025-03-25").auc_max == 4.0 and protocol.Scoring("2025-03-04").auc_max == 5.0
    with pytest.raises(ValueError, match="protocol_version must be one of 2025-03-25, 2025-03-04, got '2024'"):
        protocol.auc(values, "2024")
    with pytest.raises(ValueError, match="nsd_profile must be one of deepmind, segauge, got 'monai'"):
        protocol.Scoring(nsd_profile="monai")


def test_command_line_offers_exactly_the_protocols_choices() -> None:
    """The CLI lists the versions and NSD profiles literally (it imports nothing heavy at start-up): they must be these."""
    from segbench.cli import build_parser

    options = {a.dest: a for a in build_parser()._subparsers._group_actions[0].choices["interact"]._actions}
    interact, nsd = options["protocol_version"], options["nsd_profile"]
    assert list(interact.choices) == list(protocol.PROTOCOL_VERSIONS) and interact.default == protocol.PROTOCOL_VERSION
    assert list(nsd.choices) == list(protocol.NSD_DEFINITIONS) and nsd.default == protocol.NSD_PROFILE
