"""Area-weighted surface distances between two boolean masks: segauge's quadrature, compiled.

segauge 0.1.0 (SPEC §3) integrates over the marching-cubes surface of each mask at true spacing.
Every edge longer than the smallest spacing is bisected and its faces re-triangulated (trimesh's
``subdivide_to_size``) until none is, and every sub-face contributes the distance of its centroid to the other surface,
weighted by its area. segauge measures that distance to the nearest of a dense point sampling of
the other (subdivided) surface through a KD-tree over millions of points: that, and building the
subdivided meshes, is where its time goes (docs/scoring.md).

Here the quadrature is the same (the same marching-cubes faces split the same way, by trimesh
5.2's algorithm, the same sub-face centroids and weights), and each centroid's distance is the
*exact* distance to the other surface's triangles: the quantity segauge's sampling approximates
from above (by at most its sample spacing). A compiled kernel (numba) does the work:

* faces present identically in both surfaces (same cell, same corners) are at distance 0 and are
  not searched: that is most of the surface when a prediction errs only in places;
* faces are split one at a time, in the kernel, without building the subdivided mesh;
* each sub-face centroid starts from the previous one's nearest triangle (neighbours share it)
  and scans only the voxel cells within that distance (every marching-cubes triangle lies in
  one cell); a far point (a missed organ), where that would be many cells, searches a
  bounding-volume hierarchy over the cells instead, so its cost stays logarithmic (segauge's
  KD-tree slows down 50-75x on far points).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from segauge.metrics.distance import SurfaceDistances
from skimage.measure import marching_cubes

# Cases are scored in fork()ed worker pools; GNU OpenMP (numba's first choice here) aborts a process
# that forks after using it, numba's own work queue does not.
numba.config.THREADING_LAYER = "workqueue"

#: Faces per parallel work item.
FACE_CHUNK = 512
#: Pending triangles while one face is split (depth-first: at most 3 per level, <= 10 levels).
STACK_SIZE = 64
#: A nearest-triangle search touching more grid cells than this uses the hierarchy instead.
GRID_CELLS_MAX = 512


def surface_mesh(mask: np.ndarray, spacing: tuple[float, float, float]) -> tuple[np.ndarray, np.ndarray]:
    """Marching-cubes (vertices mm (V, 3) float64, faces (F, 3)) of ``mask`` zero-padded by one
    voxel, exactly as segauge builds it (coordinates are those of the padded array)."""
    padded = np.pad(mask, 1).astype(np.float32)
    verts, faces, _, _ = marching_cubes(padded, level=0.5, spacing=spacing)
    return verts.astype(np.float64), faces.astype(np.int64)


def _face_keys(verts: np.ndarray, faces: np.ndarray, spacing: tuple[float, float, float], shape: tuple[int, ...]) -> np.ndarray:
    """One integer per face that is equal for the same triangle in two meshes on the same grid.

    Marching cubes of a binary mask puts every vertex at the midpoint of an edge of the face's
    voxel cell, i.e. on the lattice of half spacings: the key is the cell's index and the three
    vertices' positions on its cell (each one of 27), sorted.
    """
    half = np.rint(verts * (2.0 / np.asarray(spacing))).astype(np.int64)[faces]  # (F, 3 vertices, 3 axes)
    cell = half.sum(axis=1) // 6  # the centroid's cell: strictly inside it
    local = half - 2 * cell[:, None, :]  # 0, 1 or 2 per axis
    code = np.sort((local[:, :, 0] * 3 + local[:, :, 1]) * 3 + local[:, :, 2], axis=1)
    linear = (cell[:, 0] * shape[1] + cell[:, 1]) * shape[2] + cell[:, 2]
    return ((linear * 27 + code[:, 0]) * 27 + code[:, 1]) * 27 + code[:, 2]


def _spread_bits(v: np.ndarray) -> np.ndarray:
    """Interleave-ready: bit i of v (21 bits) moved to bit 3i."""
    v = v.astype(np.uint64) & np.uint64(0x1FFFFF)
    for shift, mask in ((32, 0x1F00000000FFFF), (16, 0x1F0000FF0000FF), (8, 0x100F00F00F00F00F),
                        (4, 0x10C30C30C30C30C3), (2, 0x1249249249249249)):
        v = (v | (v << np.uint64(shift))) & np.uint64(mask)
    return v


def _surface_index(tri: np.ndarray, spacing: tuple[float, float, float], shape: tuple[int, int, int]) -> tuple[np.ndarray, ...]:
    """Search structures over the triangles of one surface.

    Marching cubes puts each triangle inside one voxel cell. Near queries use a grid: triangles
    sorted by cell, ``cell_start`` indexing them. Far queries use a bounding-volume hierarchy whose
    leaves are the non-empty cells in Morton order (``leaf_tris`` lists their triangles), each
    level above pairing neighbours. Returns (triangles, triangle boxes (n, 6), cell_start,
    leaf_tris, leaf_start, node boxes (N, 6), level offsets into the node boxes, leaves first).
    """
    cell = np.floor(tri.mean(axis=1) / np.asarray(spacing)).astype(np.int64)
    cell = np.clip(cell, 0, np.asarray(shape) - 1)
    linear = (cell[:, 0] * shape[1] + cell[:, 1]) * shape[2] + cell[:, 2]
    order = np.argsort(linear, kind="stable")
    tri, cell, linear = np.ascontiguousarray(tri[order]), cell[order], linear[order]
    tri_box = np.hstack([tri.min(axis=1), tri.max(axis=1)])
    cell_start = np.concatenate([[0], np.cumsum(np.bincount(linear, minlength=int(np.prod(shape))))]).astype(np.int32)

    code = (_spread_bits(cell[:, 0]) << np.uint64(2)) | (_spread_bits(cell[:, 1]) << np.uint64(1)) | _spread_bits(cell[:, 2])
    leaf_tris = np.argsort(code, kind="stable")
    code = code[leaf_tris]
    leaf_start = np.flatnonzero(np.concatenate([[True], code[1:] != code[:-1], [True]])).astype(np.int64)
    box = tri_box[leaf_tris]
    level_boxes = [np.hstack([np.minimum.reduceat(box[:, :3], leaf_start[:-1]), np.maximum.reduceat(box[:, 3:], leaf_start[:-1])])]
    while len(level_boxes[-1]) > 1:
        b = level_boxes[-1]
        if len(b) % 2:
            b = np.vstack([b, b[-1:]])
        pairs = b.reshape(-1, 2, 6)
        level_boxes.append(np.hstack([pairs[:, :, :3].min(axis=1), pairs[:, :, 3:].max(axis=1)]))
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in level_boxes])]).astype(np.int64)
    return tri, tri_box, cell_start, leaf_tris, leaf_start, np.ascontiguousarray(np.vstack(level_boxes)), offsets


@numba.njit(cache=True, inline="always")
def _segment_dist2(px: float, py: float, pz: float, ax: float, ay: float, az: float, bx: float, by: float, bz: float) -> float:
    dx, dy, dz = bx - ax, by - ay, bz - az
    den = dx * dx + dy * dy + dz * dz
    t = 0.0
    if den > 0.0:
        t = min(max(((px - ax) * dx + (py - ay) * dy + (pz - az) * dz) / den, 0.0), 1.0)
    ex, ey, ez = ax + t * dx - px, ay + t * dy - py, az + t * dz - pz
    return ex * ex + ey * ey + ez * ez


@numba.njit(cache=True)
def _triangle_dist2(px: float, py: float, pz: float, tri: np.ndarray, t: int) -> float:
    """Squared distance from a point to triangle ``t`` (closest point by Voronoi regions, Ericson,
    Real-Time Collision Detection 5.1.5; a degenerate triangle falls back to its edges)."""
    ax, ay, az = tri[t, 0, 0], tri[t, 0, 1], tri[t, 0, 2]
    bx, by, bz = tri[t, 1, 0], tri[t, 1, 1], tri[t, 1, 2]
    cx, cy, cz = tri[t, 2, 0], tri[t, 2, 1], tri[t, 2, 2]
    abx, aby, abz = bx - ax, by - ay, bz - az
    acx, acy, acz = cx - ax, cy - ay, cz - az
    apx, apy, apz = px - ax, py - ay, pz - az
    d1 = abx * apx + aby * apy + abz * apz
    d2 = acx * apx + acy * apy + acz * apz
    if d1 <= 0.0 and d2 <= 0.0:
        return apx * apx + apy * apy + apz * apz
    bpx, bpy, bpz = px - bx, py - by, pz - bz
    d3 = abx * bpx + aby * bpy + abz * bpz
    d4 = acx * bpx + acy * bpy + acz * bpz
    if d3 >= 0.0 and d4 <= d3:
        return bpx * bpx + bpy * bpy + bpz * bpz
    cpx, cpy, cpz = px - cx, py - cy, pz - cz
    d5 = abx * cpx + aby * cpy + abz * cpz
    d6 = acx * cpx + acy * cpy + acz * cpz
    if d6 >= 0.0 and d5 <= d6:
        return cpx * cpx + cpy * cpy + cpz * cpz
    vc = d1 * d4 - d3 * d2
    if vc <= 0.0 and d1 >= 0.0 and d3 <= 0.0:
        return _segment_dist2(px, py, pz, ax, ay, az, bx, by, bz)
    vb = d5 * d2 - d1 * d6
    if vb <= 0.0 and d2 >= 0.0 and d6 <= 0.0:
        return _segment_dist2(px, py, pz, ax, ay, az, cx, cy, cz)
    va = d3 * d6 - d5 * d4
    if va <= 0.0 and d4 - d3 >= 0.0 and d5 - d6 >= 0.0:
        return _segment_dist2(px, py, pz, bx, by, bz, cx, cy, cz)
    den = va + vb + vc
    if den <= 0.0:  # degenerate triangle
        return min(_segment_dist2(px, py, pz, ax, ay, az, bx, by, bz),
                   _segment_dist2(px, py, pz, bx, by, bz, cx, cy, cz),
                   _segment_dist2(px, py, pz, ax, ay, az, cx, cy, cz))
    v, w = vb / den, vc / den
    ex = ax + abx * v + acx * w - px
    ey = ay + aby * v + acy * w - py
    ez = az + abz * v + acz * w - pz
    return ex * ex + ey * ey + ez * ez


@numba.njit(cache=True, inline="always")
def _box_dist2(px: float, py: float, pz: float, boxes: np.ndarray, node: int) -> float:
    dx = max(boxes[node, 0] - px, 0.0, px - boxes[node, 3])
    dy = max(boxes[node, 1] - py, 0.0, py - boxes[node, 4])
    dz = max(boxes[node, 2] - pz, 0.0, pz - boxes[node, 5])
    return dx * dx + dy * dy + dz * dz


@numba.njit(cache=True)
def _hierarchy_nearest(px: float, py: float, pz: float, best2: float, best_t: int, tri: np.ndarray, leaf_tris: np.ndarray,
                       leaf_start: np.ndarray, boxes: np.ndarray, offsets: np.ndarray, stack_lv: np.ndarray,
                       stack_i: np.ndarray) -> tuple[float, int]:
    """Nearest triangle (squared distance, index) by a nearest-first, pruned traversal of the
    hierarchy, starting from a known candidate (best2, best_t); the stacks hold 2 per level."""
    n_levels = len(offsets) - 1
    stack_lv[0], stack_i[0], top = n_levels - 1, 0, 1
    while top:
        top -= 1
        lv, i = stack_lv[top], stack_i[top]
        if _box_dist2(px, py, pz, boxes, offsets[lv] + i) >= best2:
            continue
        if lv == 0:
            for k in range(leaf_start[i], leaf_start[i + 1]):
                t = leaf_tris[k]
                d2 = _triangle_dist2(px, py, pz, tri, t)
                if d2 < best2:
                    best2, best_t = d2, t
            continue
        first = 2 * i
        if first + 1 < offsets[lv] - offsets[lv - 1]:
            d0 = _box_dist2(px, py, pz, boxes, offsets[lv - 1] + first)
            d1 = _box_dist2(px, py, pz, boxes, offsets[lv - 1] + first + 1)
            near, far = (first, first + 1) if d0 <= d1 else (first + 1, first)
            stack_lv[top], stack_i[top] = lv - 1, far
            stack_lv[top + 1], stack_i[top + 1] = lv - 1, near
            top += 2
        else:
            stack_lv[top], stack_i[top] = lv - 1, first
            top += 1
    return best2, best_t


@numba.njit(cache=True)
def _nearest(px: float, py: float, pz: float, warm: int, tri: np.ndarray, tri_box: np.ndarray, cell_start: np.ndarray,
             spacing: np.ndarray, shape: np.ndarray, leaf_tris: np.ndarray, leaf_start: np.ndarray, boxes: np.ndarray,
             offsets: np.ndarray, stack_lv: np.ndarray, stack_i: np.ndarray) -> tuple[float, int]:
    """Nearest triangle to p (squared distance, index). The triangle ``warm`` (the previous
    point's nearest) bounds the search; within that ball, the grid cells it touches are scanned,
    unless they are too many (a far point), then the hierarchy is searched."""
    best2, best_t = _triangle_dist2(px, py, pz, tri, warm), warm
    r = math.sqrt(best2)
    lo0, hi0 = max(int((px - r) / spacing[0]), 0), min(int((px + r) / spacing[0]), shape[0] - 1)
    lo1, hi1 = max(int((py - r) / spacing[1]), 0), min(int((py + r) / spacing[1]), shape[1] - 1)
    lo2, hi2 = max(int((pz - r) / spacing[2]), 0), min(int((pz + r) / spacing[2]), shape[2] - 1)
    if (hi0 - lo0 + 1) * (hi1 - lo1 + 1) * (hi2 - lo2 + 1) > GRID_CELLS_MAX:
        return _hierarchy_nearest(px, py, pz, best2, best_t, tri, leaf_tris, leaf_start, boxes, offsets, stack_lv, stack_i)
    for i in range(lo0, hi0 + 1):
        dx = max(i * spacing[0] - px, 0.0, px - (i + 1) * spacing[0])
        for j in range(lo1, hi1 + 1):
            dy = max(j * spacing[1] - py, 0.0, py - (j + 1) * spacing[1])
            if dx * dx + dy * dy >= best2:
                continue
            row = (i * shape[1] + j) * shape[2]
            reach = math.sqrt(best2 - dx * dx - dy * dy)  # the ball's extent along this row
            for k in range(max(lo2, int((pz - reach) / spacing[2])), min(hi2, int((pz + reach) / spacing[2])) + 1):
                first, last = cell_start[row + k], cell_start[row + k + 1]
                if first == last:
                    continue
                dz = max(k * spacing[2] - pz, 0.0, pz - (k + 1) * spacing[2])
                if dx * dx + dy * dy + dz * dz >= best2:
                    continue
                for t in range(first, last):
                    if _box_dist2(px, py, pz, tri_box, t) < best2:
                        d2 = _triangle_dist2(px, py, pz, tri, t)
                        if d2 < best2:
                            best2, best_t = d2, t
    return best2, best_t


@numba.njit(cache=True, inline="always")
def _split_edge(t: np.ndarray, i: int, j: int, max_edge: float, mid: np.ndarray, e: int) -> bool:
    """Is edge (i, j) of the 9-vector triangle t longer than max_edge? If so, mid[e] = its midpoint."""
    dx, dy, dz = t[3 * i] - t[3 * j], t[3 * i + 1] - t[3 * j + 1], t[3 * i + 2] - t[3 * j + 2]
    if math.sqrt(dx * dx + dy * dy + dz * dz) <= max_edge:
        return False
    for k in range(3):
        mid[3 * e + k] = (t[3 * i + k] + t[3 * j + k]) / 2.0
    return True


@numba.njit(cache=True, inline="always")
def _push(stack: np.ndarray, top: int, a: np.ndarray, ia: int, b: np.ndarray, ib: int, c: np.ndarray, ic: int) -> int:
    """stack[top] = the triangle (a[ia], b[ib], c[ic]), each a point of a 9-vector."""
    for k in range(3):
        stack[top, k], stack[top, 3 + k], stack[top, 6 + k] = a[3 * ia + k], b[3 * ib + k], c[3 * ic + k]
    return top + 1


@numba.njit(cache=True)
def _subdivide(tri: np.ndarray, f: int, max_edge: float, stack: np.ndarray, work: np.ndarray,
               centroid: np.ndarray, area: np.ndarray) -> int:
    """trimesh 5.2 ``subdivide_to_size(max_edge)`` (what segauge calls) applied to face ``f``.

    trimesh bisects every edge longer than ``max_edge`` at its midpoint and re-triangulates each
    face by how many of its edges were split (1: fan to the opposite vertex; 2: corner triangle and
    the quad cut along its shorter diagonal; 3: the 1 -> 4 split), until no edge is too long. Each
    decision depends only on the face's own edges, so faces can be split one at a time. Writes the
    resulting triangles' centroids and areas (trimesh's expressions) into ``centroid`` and ``area``
    unless they are empty (count only), and returns their number. ``stack`` (STACK_SIZE, 9) and
    ``work`` (18,) are scratch space.
    """
    for v in range(3):
        for k in range(3):
            stack[0, 3 * v + k] = tri[f, v, k]
    count, top = 0, 1
    t, mid = work[:9], work[9:]
    while top:
        top -= 1
        t[:] = stack[top]
        s0 = _split_edge(t, 0, 1, max_edge, mid, 0)
        s1 = _split_edge(t, 1, 2, max_edge, mid, 1)
        s2 = _split_edge(t, 2, 0, max_edge, mid, 2)
        n_split = int(s0) + int(s1) + int(s2)
        if n_split == 0:
            if len(area):
                for k in range(3):
                    centroid[count, k] = (t[k] + t[3 + k] + t[6 + k]) / 3.0
                ux, uy, uz = t[3] - t[0], t[4] - t[1], t[5] - t[2]
                vx, vy, vz = t[6] - t[3], t[7] - t[4], t[8] - t[5]
                cx, cy, cz = uy * vz - uz * vy, uz * vx - ux * vz, ux * vy - uy * vx
                area[count] = math.sqrt(cx * cx + cy * cy + cz * cz) / 2.0
            count += 1
        elif n_split == 1:
            j = 0 if s0 else (1 if s1 else 2)  # split edge (a, b) = (j, j + 1), midpoint p
            a, b, c = j, (j + 1) % 3, (j + 2) % 3
            top = _push(stack, top, t, a, mid, j, t, c)
            top = _push(stack, top, mid, j, t, b, t, c)
        elif n_split == 2:
            j = 1 if not s0 else (2 if not s1 else 0)  # the unsplit edge is (c, a)
            a, b, c = j, (j + 1) % 3, (j + 2) % 3
            p, q = j, (j + 1) % 3  # midpoints of (a, b) and (b, c)
            top = _push(stack, top, mid, p, t, b, mid, q)
            aq = pc = 0.0
            for k in range(3):
                aq += (t[3 * a + k] - mid[3 * q + k]) ** 2
                pc += (mid[3 * p + k] - t[3 * c + k]) ** 2
            if aq <= pc:
                top = _push(stack, top, t, a, mid, p, mid, q)
                top = _push(stack, top, t, a, mid, q, t, c)
            else:
                top = _push(stack, top, t, a, mid, p, t, c)
                top = _push(stack, top, mid, p, mid, q, t, c)
        else:
            top = _push(stack, top, t, 0, mid, 0, mid, 2)
            top = _push(stack, top, mid, 0, t, 1, mid, 1)
            top = _push(stack, top, mid, 2, mid, 1, t, 2)
            top = _push(stack, top, mid, 0, mid, 1, mid, 2)
    return count


@numba.njit(cache=True, parallel=True)
def _count_subfaces(tri: np.ndarray, max_edge: float, counts: np.ndarray) -> None:
    """Sub-faces per face: a cheap first pass (splitting only) that sizes the output arrays."""
    for chunk in numba.prange(-(-len(tri) // FACE_CHUNK)):
        stack, work = np.empty((STACK_SIZE, 9)), np.empty(18)
        none_c, none_a = np.empty((0, 3)), np.empty(0)
        for f in range(chunk * FACE_CHUNK, min((chunk + 1) * FACE_CHUNK, len(tri))):
            counts[f] = _subdivide(tri, f, max_edge, stack, work, none_c, none_a)


@numba.njit(cache=True, parallel=True)
def _directed_kernel(tri_a: np.ndarray, start_a: np.ndarray, shared_a: np.ndarray, max_edge: float, spacing: np.ndarray,
                     shape: np.ndarray, tri_b: np.ndarray, tri_box: np.ndarray, cell_start: np.ndarray, leaf_tris: np.ndarray,
                     leaf_start: np.ndarray, boxes: np.ndarray, offsets: np.ndarray, dist: np.ndarray, weight: np.ndarray) -> None:
    """For every sub-face s of face f of ``tri_a`` (trimesh's subdivision), its area and the exact
    distance of its centroid to the triangles ``tri_b``, at ``start_a[f] + s``."""
    max_sub = 1
    for f in range(len(tri_a)):
        max_sub = max(max_sub, start_a[f + 1] - start_a[f])
    for chunk in numba.prange(-(-len(tri_a) // FACE_CHUNK)):
        stack, work = np.empty((STACK_SIZE, 9)), np.empty(18)
        centroid, area = np.empty((max_sub, 3)), np.empty(max_sub)
        stack_lv = np.empty(2 * len(offsets) + 2, dtype=np.int64)
        stack_i = np.empty(2 * len(offsets) + 2, dtype=np.int64)
        warm = 0
        for f in range(chunk * FACE_CHUNK, min((chunk + 1) * FACE_CHUNK, len(tri_a))):
            lo = start_a[f]
            n_sub = _subdivide(tri_a, f, max_edge, stack, work, centroid, area)
            weight[lo:lo + n_sub] = area[:n_sub]
            if shared_a[f]:  # the same triangle is in the other surface
                dist[lo:lo + n_sub] = 0.0
                continue
            for s in range(n_sub):  # consecutive sub-faces (and faces) are neighbours: warm start
                d2, warm = _nearest(centroid[s, 0], centroid[s, 1], centroid[s, 2], warm, tri_b, tri_box, cell_start,
                                    spacing, shape, leaf_tris, leaf_start, boxes, offsets, stack_lv, stack_i)
                dist[lo + s] = math.sqrt(d2)


def directed_distances(
    tri_from: np.ndarray, shared_from: np.ndarray, tri_to: np.ndarray, spacing: tuple[float, float, float],
    shape: tuple[int, int, int],
) -> tuple[np.ndarray, np.ndarray]:
    """Exact distances of the sub-face centroids of ``tri_from`` (segauge's quadrature points) to
    the surface ``tri_to``, and their weights (sub-face areas). ``shared_from`` marks faces of
    ``tri_from`` also present in ``tri_to``; ``shape``: the voxel grid (cells) both lie in."""
    tri_from = np.ascontiguousarray(tri_from)
    max_edge = float(min(spacing))
    counts = np.empty(len(tri_from), dtype=np.int64)
    _count_subfaces(tri_from, max_edge, counts)
    start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    dist, weight = np.empty(int(start[-1])), np.empty(int(start[-1]))
    shape = tuple(int(n) for n in shape)
    _directed_kernel(tri_from, start, shared_from, max_edge, np.asarray(spacing, dtype=np.float64), np.asarray(shape, dtype=np.int64),
                     *_surface_index(tri_to, spacing, shape), dist, weight)
    return dist, weight


def surface_distances(pred: np.ndarray, ref: np.ndarray, spacing: tuple[float, float, float]) -> SurfaceDistances:
    """Directed area-weighted distances pred->ref and ref->pred over segauge's sub-face centroids
    (both masks non-empty, same shape)."""
    shape = tuple(n + 2 for n in pred.shape)
    meshes = [surface_mesh(mask, spacing) for mask in (pred, ref)]
    tri = [verts[faces] for verts, faces in meshes]
    keys = [_face_keys(verts, faces, spacing, shape) for verts, faces in meshes]
    d_pg, w_pg = directed_distances(tri[0], np.isin(keys[0], keys[1]), tri[1], spacing, shape)
    d_gp, w_gp = directed_distances(tri[1], np.isin(keys[1], keys[0]), tri[0], spacing, shape)
    return SurfaceDistances(d_pg=d_pg, w_pg=w_pg, d_gp=d_gp, w_gp=w_gp)


def hausdorff95(sd: SurfaceDistances, q: float = 0.95) -> float:
    """segauge's HD95 (interpolated weighted ECDF of the pooled distances at ``q``), sorting only
    the upper tail that holds the quantile instead of millions of values."""
    values, weights = sd.both
    total = weights.sum()
    if total == 0:
        return float("nan")
    target = q * total
    k = int(len(values) * max(0.0, 1.0 - 2.0 * (1.0 - q)))
    while k > 0:
        cut = np.partition(values, k)[k]
        upper = values >= cut
        below = weights[~upper].sum()
        order = np.argsort(values[upper])
        v, w = values[upper][order], weights[upper][order]
        if below + 0.5 * w[0] <= target:  # the bracketing pair lies in the sorted tail
            cum = (below + np.cumsum(w) - 0.5 * w) / total
            return float(np.interp(q, cum, v))
        k //= 2
    order = np.argsort(values)
    v, w = values[order], weights[order]
    return float(np.interp(q, (np.cumsum(w) - 0.5 * w) / total, v))
