"""Area-weighted surface distances between two boolean masks: segauge's quadrature, compiled.

segauge 0.1.0 (docs/methodology.md#34-surface-distances-and-hd95) integrates over the marching-cubes surface of each mask at true spacing.
Every edge longer than the smallest spacing is bisected and its faces re-triangulated (trimesh's
``subdivide_to_size``) until none is, and every sub-face contributes the distance of its centroid
to the other surface, weighted by its area. segauge measures that distance to the nearest of a
dense point sampling of the other (subdivided) surface through a KD-tree over millions of points:
that, and building the subdivided meshes, is where its time goes (docs/scoring.md).
The meshes and their sub-face templates are built in ``surface_mesh``; this module searches them.

Here the quadrature is the same and each centroid's distance is the *exact* distance to the other
surface's triangles, the quantity segauge's sampling approximates from above. What makes it fast:

* A binary mask's marching-cubes surface is a lookup table: skimage's triangles in a voxel cell
  depend only on which of the cell's 8 corners are inside (``config_table`` reads them off skimage
  itself, and a test checks the full meshes are skimage's). So the mesh is built from the cells'
  corner codes, and a cell with the same code in both masks holds the same triangles: those are at
  distance 0 and never searched (most of the surface when a prediction errs only in places).
* A triangle's sub-faces depend only on its shape, and there are at most a few hundred shapes
  (table entries): each is split once per spacing (``subface_templates``); a face's quadrature
  points are its template's, moved to its cell.
* The quadrature points of the faces in one cell are searched together: starting from the
  previous cell's nearest triangle (neighbours share it), they scan only the surface cells within
  that distance, row by row (each row lists its occupied cells), within a local radius first and
  nearest rows and cells first, and each cell found is tested against each point. Far points (a
  missed organ), where that would be many rows, find their cells through a bounding-volume
  hierarchy over the occupied cells instead, so their cost stays logarithmic (segauge's KD-tree
  slows down 50-75x on far points); it is built only when some point needs it.
* The point-triangle test takes the triangle's edge products from its table entry and exits early
  on the triangle's plane distance.
"""

from __future__ import annotations

import functools
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import cast

import numba
import numpy as np
from segauge.metrics.distance import SurfaceDistances

from segbench.scoring.surface_mesh import Mesh, cell_codes, entry_triangles, subface_templates, surface_mesh

# Cases are scored in fork()ed worker pools; GNU OpenMP (numba's first choice here) aborts a process
# that forks after using it, numba's own work queue does not.
numba.config.THREADING_LAYER = "workqueue"  # type: ignore[attr-defined]  # numba sets its config at import
#: The work queue runs one parallel kernel at a time: the two directions of a surface, measured in
#: two threads, take turns at the search and overlap the rest (mesh, search index) with it.
_SEARCH_LOCK = threading.Lock()

#: Surface cells (each with its faces) per parallel work item.
CELL_CHUNK = 512
#: A nearest-triangle search crossing more cell rows than this uses the hierarchy instead.
ROWS_MAX = 256
#: Radius of a cell's first, local row scan, in its grid's larger in-plane spacing: a poor warm
#: start would otherwise send faces that lie a voxel from the other surface to the hierarchy.
LOCAL_RADIUS_CELLS = 2.0

#: Columns of ``entry_geometry``: edge vectors ab and ac, unit normal, |ab|^2, |ac|^2, ab.ac, and the
#: reciprocals of |ab|^2, |ac|^2 and |bc|^2.
AB, AC, NORMAL, AA, CC, BC, INV_AA, INV_CC, INV_BB = 0, 3, 6, 9, 10, 11, 12, 13, 14


@functools.cache
def entry_geometry(spacing: tuple[float, float, float]) -> np.ndarray:
    """Per ``config_table()`` triangle at this spacing, what the distance test needs besides its
    first vertex (columns named above): a mesh triangle is its entry's shape moved to its cell, so
    these are computed once per entry instead of once per test. Every entry has a positive area."""
    tri = entry_triangles(spacing)
    ab, ac = tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]
    normal = np.cross(ab, ac)
    norm = np.linalg.norm(normal, axis=1)
    if not (norm > 0).all():
        raise ValueError(f"degenerate marching-cubes triangle at spacing {spacing}")
    aa, cc, bc = (ab * ab).sum(1), (ac * ac).sum(1), (ab * ac).sum(1)
    bb = ((ac - ab) ** 2).sum(1)
    return np.ascontiguousarray(np.column_stack([ab, ac, normal / norm[:, None], aa, cc, bc, 1 / aa, 1 / cc, 1 / bb]))


@numba.njit(cache=True, inline="always")
def _triangle_dist2(px: float, py: float, pz: float, tri: np.ndarray, tri_entry: np.ndarray, geo: np.ndarray, t: int, bound: float) -> float:
    """Squared distance from a point to triangle ``t``, or, if its plane is already ``bound`` or
    farther, that plane's squared distance (a lower bound: the caller keeps only nearer triangles).

    Closest point by Voronoi regions (Ericson, Real-Time Collision Detection 5.1.5) with the dot
    products of the edges taken from the triangle's table entry (``entry_geometry``): two dot
    products per test instead of six, and no division."""
    e = tri_entry[t]
    apx, apy, apz = px - tri[t, 0, 0], py - tri[t, 0, 1], pz - tri[t, 0, 2]
    pn = apx * geo[e, NORMAL] + apy * geo[e, NORMAL + 1] + apz * geo[e, NORMAL + 2]
    if pn * pn >= bound:
        return pn * pn
    abx, aby, abz = geo[e, AB], geo[e, AB + 1], geo[e, AB + 2]
    acx, acy, acz = geo[e, AC], geo[e, AC + 1], geo[e, AC + 2]
    d1 = abx * apx + aby * apy + abz * apz
    d2 = acx * apx + acy * apy + acz * apz
    if d1 <= 0.0 and d2 <= 0.0:  # vertex a
        return apx * apx + apy * apy + apz * apz
    d3, d4 = d1 - geo[e, AA], d2 - geo[e, BC]  # ab.bp, ac.bp
    if d3 >= 0.0 and d4 <= d3:  # vertex b
        bx, by, bz = apx - abx, apy - aby, apz - abz
        return bx * bx + by * by + bz * bz
    d5, d6 = d1 - geo[e, BC], d2 - geo[e, CC]  # ab.cp, ac.cp
    if d6 >= 0.0 and d5 <= d6:  # vertex c
        cx, cy, cz = apx - acx, apy - acy, apz - acz
        return cx * cx + cy * cy + cz * cz
    if d1 * d4 - d3 * d2 <= 0.0 and d1 >= 0.0 and d3 <= 0.0:  # edge ab
        u = d1 * geo[e, INV_AA]
        x, y, z = apx - u * abx, apy - u * aby, apz - u * abz
        return x * x + y * y + z * z
    if d5 * d2 - d1 * d6 <= 0.0 and d2 >= 0.0 and d6 <= 0.0:  # edge ac
        u = d2 * geo[e, INV_CC]
        x, y, z = apx - u * acx, apy - u * acy, apz - u * acz
        return x * x + y * y + z * z
    if d3 * d6 - d5 * d4 <= 0.0 and d4 - d3 >= 0.0 and d5 - d6 >= 0.0:  # edge bc
        u = (d4 - d3) * geo[e, INV_BB]
        x, y, z = apx - abx - u * (acx - abx), apy - aby - u * (acy - aby), apz - abz - u * (acz - abz)
        return x * x + y * y + z * z
    return pn * pn  # inside: the plane's distance


@numba.njit(cache=True, inline="always")
def _box_gap2(boxes: np.ndarray, n: int, lo_x: float, lo_y: float, lo_z: float, hi_x: float, hi_y: float, hi_z: float) -> float:
    """Squared distance between box ``n`` of ``boxes`` and the box (lo, hi)."""
    gx = max(boxes[n, 0] - hi_x, 0.0, lo_x - boxes[n, 3])
    gy = max(boxes[n, 1] - hi_y, 0.0, lo_y - boxes[n, 4])
    gz = max(boxes[n, 2] - hi_z, 0.0, lo_z - boxes[n, 5])
    return gx * gx + gy * gy + gz * gz


@numba.njit(cache=True, inline="always")
def _box_dist2(px: float, py: float, pz: float, boxes: np.ndarray, node: int) -> float:
    """Squared distance from a point to box ``node`` of ``boxes`` (the box gap to a point)."""
    return _box_gap2(boxes, node, px, py, pz, px, py, pz)


def _spread_bits(v: np.ndarray) -> np.ndarray:
    """Interleave-ready: bit i of v (21 bits) moved to bit 3i."""
    v = v.astype(np.uint64) & np.uint64(0x1FFFFF)
    for shift, mask in ((32, 0x1F00000000FFFF), (16, 0x1F0000FF0000FF), (8, 0x100F00F00F00F00F), (4, 0x10C30C30C30C30C3), (2, 0x1249249249249249)):
        v = (v | (v << np.uint64(shift))) & np.uint64(mask)
    return v


@numba.njit(cache=True, nogil=True)
def _cell_boxes(tri: np.ndarray, cell_start: np.ndarray) -> np.ndarray:
    """Axis-aligned box (lo xyz, hi xyz) of every cell's triangles."""
    cell_box = np.empty((len(cell_start) - 1, 6))
    for c in range(len(cell_start) - 1):
        cell_box[c, :3], cell_box[c, 3:] = np.inf, -np.inf
        for t in range(cell_start[c], cell_start[c + 1]):
            for v in range(3):
                for a in range(3):
                    cell_box[c, a] = min(cell_box[c, a], tri[t, v, a])
                    cell_box[c, 3 + a] = max(cell_box[c, 3 + a], tri[t, v, a])
    return cell_box


@numba.njit(cache=True, nogil=True)
def _hierarchy_boxes(leaf_box: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Boxes of a hierarchy over ``leaf_box``: each level pairs neighbours of the level below (an
    odd last one is paired with itself), up to one root. Returns (boxes, level offsets, leaves first)."""
    sizes = [len(leaf_box)]
    while sizes[-1] > 1:
        sizes.append((sizes[-1] + 1) // 2)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    for lv in range(len(sizes)):
        offsets[lv + 1] = offsets[lv] + sizes[lv]
    boxes = np.empty((offsets[-1], 6))
    boxes[: len(leaf_box)] = leaf_box
    for lv in range(1, len(sizes)):
        below, n_below = offsets[lv - 1], sizes[lv - 1]
        for i in range(sizes[lv]):
            a, b = below + 2 * i, below + min(2 * i + 1, n_below - 1)
            for k in range(3):
                boxes[offsets[lv] + i, k] = min(boxes[a, k], boxes[b, k])
                boxes[offsets[lv] + i, 3 + k] = max(boxes[a, 3 + k], boxes[b, 3 + k])
    return boxes, offsets


def _row_index(mesh: Mesh, spacing: tuple[float, float, float]) -> tuple[np.ndarray, ...]:
    """The row scan's structures over a mesh's triangles (kernel arguments, in this order).

    Queries scan rows of cells (i, j, all k): ``row_start`` indexes each row's occupied cells in
    ``cells`` order, whose k is ``cell_k``. Returns (triangles, their table entries,
    ``entry_geometry`` at this spacing, cell_start, cell boxes (the box of each occupied cell's
    triangles), cell_k, row_start).
    """
    n0, n1, n2 = mesh.grid
    tri = np.ascontiguousarray(mesh.tri)
    row, cell_k = np.divmod(mesh.cells, n2)
    row_start = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=n0 * n1))]).astype(np.int64)
    return (tri, mesh.entry, entry_geometry(spacing), mesh.cell_start, _cell_boxes(tri, mesh.cell_start), cell_k.astype(np.int64), row_start)


def _hierarchy(mesh: Mesh, cell_box: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The far queries' bounding-volume hierarchy over a mesh's occupied cells (kernel arguments):
    leaves are the cells in Morton order (``leaf_cell``), each level above pairing neighbours.
    Returns (leaf_cell, node boxes (N, 6), level offsets into the node boxes, leaves first)."""
    _, n1, n2 = mesh.grid
    row, cell_k = np.divmod(mesh.cells, n2)
    i, j = np.divmod(row, n1)
    code = (_spread_bits(i) << np.uint64(2)) | (_spread_bits(j) << np.uint64(1)) | _spread_bits(cell_k)
    leaf_cell = np.argsort(code, kind="stable")
    boxes, offsets = _hierarchy_boxes(cell_box[leaf_cell])
    return leaf_cell.astype(np.int64), boxes, offsets


#: Kernel arguments standing for "no hierarchy yet" (``_directed_kernel``'s first pass).
NO_HIERARCHY = (np.empty(0, dtype=np.int64), np.empty((0, 6)), np.empty(0, dtype=np.int64))


@numba.njit(cache=True, inline="always")
def _cell_triangles(
    px: float, py: float, pz: float, best2: float, best_t: int, tri: np.ndarray, tri_entry: np.ndarray, geo: np.ndarray, first: int, last: int
) -> tuple[float, int]:
    """Nearest of triangles first..last-1 if nearer than best."""
    for t in range(first, last):
        d2 = _triangle_dist2(px, py, pz, tri, tri_entry, geo, t, best2)
        if d2 < best2:
            best2, best_t = d2, t
    return best2, best_t


@numba.njit(cache=True, inline="always")
def _points_box(pts: np.ndarray, m: int, best2: np.ndarray, cap2: float) -> tuple[float, float, float, float, float, float, float]:
    """Box (lo xyz, hi xyz) of the points ``pts[:, :m]`` (coordinate-major) and the largest of their squared radii ``best2``, at most ``cap2``."""
    lo_x, lo_y, lo_z = pts[0, 0], pts[1, 0], pts[2, 0]
    hi_x, hi_y, hi_z = lo_x, lo_y, lo_z
    r2 = best2[0]
    for s in range(1, m):
        lo_x, hi_x = min(lo_x, pts[0, s]), max(hi_x, pts[0, s])
        lo_y, hi_y = min(lo_y, pts[1, s]), max(hi_y, pts[1, s])
        lo_z, hi_z = min(lo_z, pts[2, s]), max(hi_z, pts[2, s])
        r2 = max(r2, best2[s])
    return lo_x, lo_y, lo_z, hi_x, hi_y, hi_z, min(r2, cap2)


@numba.njit(cache=True, inline="always")
def _largest(best2: np.ndarray, m: int) -> float:
    """The largest of the squared radii ``best2[:m]``: the ball every remaining search of the points lies in."""
    r2 = best2[0]
    for s in range(1, m):
        r2 = max(r2, best2[s])
    return r2


@numba.njit(cache=True, inline="always")
def _cell_points(
    c: int,
    pts: np.ndarray,
    m: int,
    best2: np.ndarray,
    best_t: np.ndarray,
    r2: float,
    tri: np.ndarray,
    tri_entry: np.ndarray,
    geo: np.ndarray,
    cell_start: np.ndarray,
    cell_box: np.ndarray,
) -> float:
    """Test cell ``c``'s triangles against each of the points ``pts[:, :m]`` whose ball reaches the
    cell's box, improving (best2, best_t) in place; returns the new largest squared radius.

    ``_nearest_together`` has this loop written out: called through this helper, its row scan
    is slower (timed: benchmarks/README.md)."""
    improved = False
    for s in range(m):
        if _box_dist2(pts[0, s], pts[1, s], pts[2, s], cell_box, c) < best2[s]:
            b2, bt = _cell_triangles(pts[0, s], pts[1, s], pts[2, s], best2[s], best_t[s], tri, tri_entry, geo, cell_start[c], cell_start[c + 1])
            improved |= b2 < best2[s]
            best2[s], best_t[s] = b2, bt
    return _largest(best2, m) if improved else r2


# The search of _nearest_together: within the ball of the largest remaining radius around the points' bounding box, at
# most sqrt(cap2), the occupied cells of the rows it crosses are scanned: the points lie within one cell, so they need
# almost the same rows and cells, found once and each tested against each point. Rows, and cells within a row, are
# visited from the points outwards, so the radius shrinks before the far ones. A cell that reaches the points' box is
# tested against each point in two loops: first every point's squared gap to the cell's box into ``gap`` (scratch, one
# per point; the points stored coordinate-major so the loop has no branch and reads them in order), then the points
# whose gap is within their best; one loop with the test inside costs more CPU for the same distances bit for bit
# (timed: benchmarks/README.md).
# Typed up front, as is _nearest_together_hierarchy: lazily, the kernel's call sites compiled each twice, once for a
# literal 0 count (a cold cache's first surface took longer; timed: benchmarks/README.md).
@numba.njit(
    "b1(f8[:, ::1], i8, f8[::1], i8[::1], f8[::1], i8[::1], f8[:, :, ::1], i8[::1], f8[:, ::1], i8[::1], f8[:, ::1], i8[::1], i8[::1], f8, f8[::1])", cache=True
)
def _nearest_together(
    pts: np.ndarray,
    m: int,
    best2: np.ndarray,
    best_t: np.ndarray,
    spacing: np.ndarray,
    grid: np.ndarray,
    tri: np.ndarray,
    tri_entry: np.ndarray,
    geo: np.ndarray,
    cell_start: np.ndarray,
    cell_box: np.ndarray,
    cell_k: np.ndarray,
    row_start: np.ndarray,
    cap2: float,
    gap: np.ndarray,
) -> bool:
    """Nearest triangles to the m points ``pts[:, :m]`` (the faces of one cell), each improving its candidate (best2[s], best_t[s]) in place (search: above).
    True if every point's nearest triangle is found (a point whose best lies within the cap has it); False if some point's best is still at or beyond the cap,
    or, having changed nothing, if the ball crosses over ROWS_MAX rows (far points: the caller searches wider or through the hierarchy)."""
    lo_x, lo_y, lo_z, hi_x, hi_y, hi_z, r2 = _points_box(pts, m, best2, cap2)
    r = math.sqrt(r2)
    lo0, hi0 = max(int((lo_x - r) / spacing[0]), 0), min(int((hi_x + r) / spacing[0]), grid[0] - 1)
    lo1, hi1 = max(int((lo_y - r) / spacing[1]), 0), min(int((hi_y + r) / spacing[1]), grid[1] - 1)
    if (hi0 - lo0 + 1) * (hi1 - lo1 + 1) > ROWS_MAX:
        return False
    # rows in the order i = c0, c0 + 1, c0 - 1, c0 + 2, ... (the same for j) around the points' centre
    c0 = min(max(int(0.5 * (lo_x + hi_x) / spacing[0]), lo0), hi0)
    c1 = min(max(int(0.5 * (lo_y + hi_y) / spacing[1]), lo1), hi1)
    k0 = int(0.5 * (lo_z + hi_z) / spacing[2])
    for a in range(2 * max(c0 - lo0, hi0 - c0) + 1):
        i = c0 + (a + 1) // 2 if a % 2 else c0 - a // 2
        if i < lo0 or i > hi0:
            continue
        dx = max(i * spacing[0] - hi_x, 0.0, lo_x - (i + 1) * spacing[0])
        if dx * dx >= r2:
            continue
        for b in range(2 * max(c1 - lo1, hi1 - c1) + 1):
            j = c1 + (b + 1) // 2 if b % 2 else c1 - b // 2
            if j < lo1 or j > hi1:
                continue
            dy = max(j * spacing[1] - hi_y, 0.0, lo_y - (j + 1) * spacing[1])
            dxy = dx * dx + dy * dy
            if dxy >= r2:
                continue
            row = i * grid[1] + j
            # occupied cells of the row (k ascending) from the points' k0 outwards: the first at or after k0, then up (step 1)
            # until beyond the ball, then down (step -1)
            start, end = row_start[row], row_start[row + 1]
            lo = start + np.searchsorted(cell_k[start:end], k0)
            c, step = lo, 1
            while True:
                if step == 1:
                    dz = cell_k[c] * spacing[2] - hi_z if c < end else np.inf
                    if dz > 0.0 and dxy + dz * dz >= r2:
                        c, step = lo - 1, -1  # this and every later cell lie beyond every point's ball
                if step == -1:
                    dz = lo_z - (cell_k[c] + 1) * spacing[2] if c >= start else np.inf
                    if dz > 0.0 and dxy + dz * dz >= r2:
                        break
                if _box_gap2(cell_box, c, lo_x, lo_y, lo_z, hi_x, hi_y, hi_z) >= r2:
                    c += step
                    continue  # the box of the cell's triangles is beyond every point's ball
                improved = False
                bx0, by0, bz0 = cell_box[c, 0], cell_box[c, 1], cell_box[c, 2]
                bx1, by1, bz1 = cell_box[c, 3], cell_box[c, 4], cell_box[c, 5]
                for s in range(m):
                    gx = max(bx0 - pts[0, s], 0.0, pts[0, s] - bx1)
                    gy = max(by0 - pts[1, s], 0.0, pts[1, s] - by1)
                    gz = max(bz0 - pts[2, s], 0.0, pts[2, s] - bz1)
                    gap[s] = gx * gx + gy * gy + gz * gz
                for s in range(m):
                    if gap[s] < best2[s]:
                        b2, bt = _cell_triangles(pts[0, s], pts[1, s], pts[2, s], best2[s], best_t[s], tri, tri_entry, geo, cell_start[c], cell_start[c + 1])
                        improved |= b2 < best2[s]
                        best2[s], best_t[s] = b2, bt
                if improved:
                    r2 = min(_largest(best2, m), cap2)
                c += step
    return _largest(best2, m) < cap2


@numba.njit(
    "void(f8[:, ::1], i8, f8[::1], i8[::1], f8[:, :, ::1], i8[::1], f8[:, ::1], i8[::1], f8[:, ::1], i8[::1], f8[:, ::1], i8[::1], i8[::1], i8[::1])",
    cache=True,
)
def _nearest_together_hierarchy(
    pts: np.ndarray,
    m: int,
    best2: np.ndarray,
    best_t: np.ndarray,
    tri: np.ndarray,
    tri_entry: np.ndarray,
    geo: np.ndarray,
    cell_start: np.ndarray,
    cell_box: np.ndarray,
    leaf_cell: np.ndarray,
    boxes: np.ndarray,
    offsets: np.ndarray,
    stack_lv: np.ndarray,
    stack_i: np.ndarray,
) -> None:
    """``_nearest_together`` for points far from the triangles: the occupied cells within the ball
    are found by a nearest-first, pruned traversal of the hierarchy instead of row by row, so the
    cost grows with the log of the surface, not with the ball. The stacks hold 2 per level."""
    lo_x, lo_y, lo_z, hi_x, hi_y, hi_z, r2 = _points_box(pts, m, best2, np.inf)
    n_levels = len(offsets) - 1
    stack_lv[0], stack_i[0], top = n_levels - 1, 0, 1
    while top:
        top -= 1
        lv, i = stack_lv[top], stack_i[top]
        if _box_gap2(boxes, offsets[lv] + i, lo_x, lo_y, lo_z, hi_x, hi_y, hi_z) >= r2:
            continue
        if lv == 0:
            r2 = _cell_points(leaf_cell[i], pts, m, best2, best_t, r2, tri, tri_entry, geo, cell_start, cell_box)
            continue
        first = 2 * i
        if first + 1 < offsets[lv] - offsets[lv - 1]:
            d0 = _box_gap2(boxes, offsets[lv - 1] + first, lo_x, lo_y, lo_z, hi_x, hi_y, hi_z)
            d1 = _box_gap2(boxes, offsets[lv - 1] + first + 1, lo_x, lo_y, lo_z, hi_x, hi_y, hi_z)
            near, far = (first, first + 1) if d0 <= d1 else (first + 1, first)
            stack_lv[top], stack_i[top] = lv - 1, far
            stack_lv[top + 1], stack_i[top + 1] = lv - 1, near
            top += 2
        else:
            stack_lv[top], stack_i[top] = lv - 1, first
            top += 1


@numba.njit(cache=True, inline="always")
def _run_points(
    r: int,
    face_cell: np.ndarray,
    face_entry: np.ndarray,
    run_first: np.ndarray,
    sub_start: np.ndarray,
    sub_centroid: np.ndarray,
    sub_area: np.ndarray,
    spacing: np.ndarray,
    grid: np.ndarray,
    pts: np.ndarray,
    weight: np.ndarray,
    out: int,
) -> int:
    """The sub-face centroids of run r's faces (one cell's) into ``pts`` (coordinate-major), their areas into
    ``weight[out:]``; returns their number."""
    ij, k = divmod(face_cell[run_first[r]], grid[2])
    i, j = divmod(ij, grid[1])
    m = 0
    for f in range(run_first[r], run_first[r + 1]):
        for sub in range(sub_start[face_entry[f]], sub_start[face_entry[f] + 1]):
            pts[0, m] = i * spacing[0] + sub_centroid[sub, 0]
            pts[1, m] = j * spacing[1] + sub_centroid[sub, 1]
            pts[2, m] = k * spacing[2] + sub_centroid[sub, 2]
            weight[out + m] = sub_area[sub]
            m += 1
    return m


@numba.njit(cache=True, parallel=True, nogil=True)
def _directed_kernel(
    face_cell: np.ndarray,
    face_entry: np.ndarray,
    run_first: np.ndarray,
    run_hint: np.ndarray,
    runs: np.ndarray,
    chunk_order: np.ndarray,
    out_start: np.ndarray,
    sub_start: np.ndarray,
    sub_centroid: np.ndarray,
    sub_area: np.ndarray,
    spacing: np.ndarray,
    grid: np.ndarray,
    tri: np.ndarray,
    tri_entry: np.ndarray,
    geo: np.ndarray,
    cell_start: np.ndarray,
    cell_box: np.ndarray,
    cell_k: np.ndarray,
    row_start: np.ndarray,
    leaf_cell: np.ndarray,
    boxes: np.ndarray,
    offsets: np.ndarray,
    dist: np.ndarray,
    weight: np.ndarray,
    far: np.ndarray,
) -> None:
    """For every sub-face s of face f (in cell ``face_cell[f]``, table entry ``face_entry[f]``): its
    area and the exact distance of its centroid to the triangles ``tri``, at ``out_start[f] + s``.
    Faces ``run_first[r]:run_first[r + 1]`` (run r) lie in one cell. The runs ``runs`` are searched
    in chunks of CELL_CHUNK, in the order ``chunk_order`` (``_interleaved``).

    The sub-faces of all the faces of one cell are searched together, row by row
    (``_nearest_together``): first within LOCAL_RADIUS_CELLS, which settles points near the other
    surface however poor their warm start; then, if some point is not settled, within their whole
    radius. If that ball crosses too many rows (far points), the run is marked ``far`` and left:
    the caller builds the hierarchy only then, and passes the far runs again with it (``offsets``
    not empty), which they search through at once (``_nearest_together_hierarchy``). All start
    from the previous run's nearest triangle or ``run_hint[r]`` (a triangle of ``tri`` in the
    occupied cell nearest to run r's in cell order), whichever is nearer: consecutive cells can be
    far apart (the far side of the organ in the same row)."""
    local2 = (LOCAL_RADIUS_CELLS * max(spacing[0], spacing[1])) ** 2
    n_runs = len(run_first) - 1
    most = 1
    for r in range(n_runs):
        most = max(most, out_start[run_first[r + 1]] - out_start[run_first[r]])
    with_hierarchy = len(offsets) > 0
    for q in numba.prange(len(chunk_order)):
        chunk = chunk_order[q]
        stack_lv = np.empty(2 * len(offsets) + 2, dtype=np.int64)
        stack_i = np.empty(2 * len(offsets) + 2, dtype=np.int64)
        pts, best2, best_t = np.empty((3, most)), np.empty(most), np.empty(most, dtype=np.int64)
        gap = np.empty(most)
        warm = 0
        for p in range(chunk * CELL_CHUNK, min((chunk + 1) * CELL_CHUNK, len(runs))):
            r = runs[p]
            out = out_start[run_first[r]]
            m = _run_points(r, face_cell, face_entry, run_first, sub_start, sub_centroid, sub_area, spacing, grid, pts, weight, out)
            if m == 0:
                continue
            if _triangle_dist2(pts[0, 0], pts[1, 0], pts[2, 0], tri, tri_entry, geo, run_hint[r], np.inf) < _triangle_dist2(
                pts[0, 0], pts[1, 0], pts[2, 0], tri, tri_entry, geo, warm, np.inf
            ):
                warm = run_hint[r]
            for s in range(m):
                best2[s], best_t[s] = _triangle_dist2(pts[0, s], pts[1, s], pts[2, s], tri, tri_entry, geo, warm, np.inf), warm
            if with_hierarchy:
                _nearest_together_hierarchy(pts, m, best2, best_t, tri, tri_entry, geo, cell_start, cell_box, leaf_cell, boxes, offsets, stack_lv, stack_i)
            elif not (
                _nearest_together(pts, m, best2, best_t, spacing, grid, tri, tri_entry, geo, cell_start, cell_box, cell_k, row_start, local2, gap)
                or _nearest_together(pts, m, best2, best_t, spacing, grid, tri, tri_entry, geo, cell_start, cell_box, cell_k, row_start, np.inf, gap)
            ):
                far[r] = 1
                continue
            warm = best_t[m - 1]
            for s in range(m):
                dist[out + s] = math.sqrt(best2[s])


def _interleaved(n_chunks: int, threads: int) -> np.ndarray:
    """The chunks 0..n_chunks-1 ordered so that each thread's equal share of a parallel loop (numba
    splits it into contiguous blocks) is every ``threads``-th chunk: the searches that cost most lie
    together (a spurious organ far from the reference), and one block would hold most of them
    (timed: benchmarks/README.md)."""
    return np.concatenate([np.arange(t, n_chunks, threads) for t in range(threads)]).astype(np.int64)


def _nearest_in_order(cells: np.ndarray, query: np.ndarray) -> np.ndarray:
    """For each of the linear cell ids ``query``, the position in the sorted ``cells`` of the
    occupied cell just before or just after it, whichever is nearer in linear order: usually one of
    its own row (i, j), a few k away. (Always the one after sent a face at the end of a row to the
    next row, the far side of the organ.)"""
    pos = np.searchsorted(cells, query)
    after, before = np.minimum(pos, len(cells) - 1), np.maximum(pos - 1, 0)
    return np.where(np.abs(cells[after] - query) <= np.abs(query - cells[before]), after, before)


def directed_distances(faces: np.ndarray, mesh_from: Mesh, mesh_to: Mesh, spacing: tuple[float, float, float]) -> tuple[np.ndarray, np.ndarray]:
    """Exact distances of the sub-face centroids (segauge's quadrature points) of the triangles
    ``faces`` (indices into ``mesh_from.tri``) to the surface ``mesh_to``, and their weights
    (sub-face areas). Both meshes on one grid."""
    if len(faces) == 0:
        return np.empty(0), np.empty(0)
    sub_start, sub_centroid, sub_area = subface_templates(tuple(float(s) for s in spacing))
    face_entry = mesh_from.entry[faces]
    counts = sub_start[face_entry + 1] - sub_start[face_entry]
    out_start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    dist, weight = np.empty(int(out_start[-1])), np.empty(int(out_start[-1]))
    face_cell = mesh_from.triangle_cells()[faces]
    # runs of faces in one cell (a mesh's faces come cell by cell)
    run_first = np.flatnonzero(np.concatenate([[True], face_cell[1:] != face_cell[:-1], [True]]))
    hint = mesh_to.cell_start[_nearest_in_order(mesh_to.cells, face_cell[run_first[:-1]])]
    rows = _row_index(mesh_to, cast(tuple[float, float, float], tuple(float(x) for x in spacing)))
    far = np.zeros(len(hint), dtype=np.uint8)

    def search(runs: np.ndarray, hierarchy: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        with _SEARCH_LOCK:
            _directed_kernel(
                face_cell,
                face_entry,
                run_first,
                hint,
                runs,  # type: ignore[call-arg]  # a numba dispatcher: mypy sees no signature
                _interleaved(-(-len(runs) // CELL_CHUNK), numba.get_num_threads()),
                out_start,
                sub_start,
                sub_centroid,
                sub_area,
                np.asarray(spacing, dtype=np.float64),
                np.asarray(mesh_to.grid, dtype=np.int64),
                *rows,
                *hierarchy,
                dist,
                weight,
                far,
            )

    search(np.arange(len(hint)), NO_HIERARCHY)
    far_runs = np.flatnonzero(far)
    if len(far_runs):  # beyond the rows' reach (a missed or spurious organ): the hierarchy, built only now
        search(far_runs, _hierarchy(mesh_to, rows[4]))
    return dist, weight


@functools.cache
def entry_areas(spacing: tuple[float, float, float]) -> np.ndarray:
    """Area (mm^2) of every ``config_table()`` triangle at this spacing: a face's area is its entry's."""
    tri = entry_triangles(spacing)
    return np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1) / 2.0


def _directed_with_shared(
    codes_from: np.ndarray, codes_to: np.ndarray, mesh_from: Mesh, mesh_to: Mesh, spacing: tuple[float, float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """``directed_distances`` of every face of ``mesh_from``: a face in a cell with the same corner
    code in both masks is also in the other surface, one sample at distance 0 weighted by its area."""
    cell = mesh_from.triangle_cells()
    shared = codes_to.ravel()[cell] == codes_from.ravel()[cell]
    dist, weight = directed_distances(np.flatnonzero(~shared), mesh_from, mesh_to, spacing)
    areas = entry_areas(tuple(float(x) for x in spacing))[mesh_from.entry[shared]]
    return np.concatenate([np.zeros(len(areas)), dist]), np.concatenate([areas, weight])


def surface_distances(pred: np.ndarray, ref: np.ndarray, spacing: tuple[float, float, float]) -> SurfaceDistances:
    """Directed area-weighted distances pred->ref and ref->pred at segauge's quadrature points
    (both masks non-empty, same shape). Faces in cells with the same corner code in both masks are
    in both surfaces: each is one sample at distance 0 weighted by its area, not split.

    The two masks' meshes, and the two directions, are built in two threads (the compiled parts
    release the GIL), the searches taking turns (``_SEARCH_LOCK``); with one kernel thread (cases
    in a worker pool) everything runs in order."""
    with ThreadPoolExecutor(max_workers=numba.get_num_threads()) as pool:
        codes = list(pool.map(cell_codes, (pred, ref)))
        meshes = list(pool.map(surface_mesh, codes, (spacing, spacing)))
        (d_pg, w_pg), (d_gp, w_gp) = pool.map(_directed_with_shared, codes, codes[::-1], meshes, meshes[::-1], (spacing, spacing))
    return SurfaceDistances(d_pg=d_pg, w_pg=w_pg, d_gp=d_gp, w_gp=w_gp)
