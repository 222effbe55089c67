"""A binary mask's marching-cubes surface, by table lookup, and segauge's sub-faces of its triangles.

skimage's triangles in a voxel cell depend only on which of the cell's 8 corners are inside, so
``config_table`` reads them off skimage once and a mask's mesh is built from its cells' corner codes
(``cell_codes``, ``surface_mesh``). A triangle's sub-faces (trimesh's ``subdivide_to_size``, what
segauge integrates over) depend only on its shape: ``subface_templates`` splits each table entry
once per spacing. ``surface`` measures distances between such meshes.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import cast

import numba
import numpy as np

#: Pending triangles while one face is split (depth-first: at most 3 per level, <= 10 levels).
STACK_SIZE = 64
#: Bit b of a cell's corner code is the corner (b >> 2 & 1, b >> 1 & 1, b & 1) of the cell.
CORNERS: tuple[tuple[int, int, int], ...] = tuple((b >> 2 & 1, b >> 1 & 1, b & 1) for b in range(8))


@functools.cache
def config_table() -> tuple[np.ndarray, np.ndarray]:
    """skimage's marching-cubes triangles for each of the 256 corner codes of one voxel cell.

    Returns (vertices (T, 3, 3) in half-voxel units within the cell, each coordinate 0, 1 or 2: the
    vertices of a binary mask's surface are voxel-edge midpoints; start (257,): the triangles of
    code c are ``vertices[start[c]:start[c + 1]]``), from skimage's own output on each 2x2x2 cube.
    """
    from skimage.measure import marching_cubes

    tris, counts = [], []
    for code in range(256):
        cube = np.zeros((2, 2, 2), dtype=np.float32)
        for b, corner in enumerate(CORNERS):
            cube[corner] = code >> b & 1
        if code in (0, 255):
            counts.append(0)
            continue
        verts, faces, _, _ = marching_cubes(cube, level=0.5)
        tris.append(np.rint(verts * 2).astype(np.int64)[faces])
        counts.append(len(faces))
    return np.concatenate(tris), np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def entry_triangles(spacing: tuple[float, float, float]) -> np.ndarray:
    """Every ``config_table()`` triangle at this spacing (mm, relative to its cell's low corner)."""
    table, _ = config_table()
    return table * (np.asarray(spacing, dtype=np.float64) / 2.0)


@numba.njit(cache=True, nogil=True)
def _corner_codes(mask: np.ndarray) -> np.ndarray:
    """``cell_codes`` in one pass: each inside voxel sets its bit in the 8 cells it is a corner of."""
    n0, n1, n2 = mask.shape
    codes = np.zeros((n0 + 1, n1 + 1, n2 + 1), dtype=np.uint8)
    for i in range(n0):
        for j in range(n1):
            for k in range(n2):
                if mask[i, j, k]:  # padded voxel (i + 1, j + 1, k + 1): corner b of the cell that far before it
                    for b in range(8):
                        ci, cj, ck = CORNERS[b]
                        codes[i + 1 - ci, j + 1 - cj, k + 1 - ck] |= np.uint8(1 << b)
    return codes


def cell_codes(mask: np.ndarray) -> np.ndarray:
    """Corner code of every voxel cell of ``mask`` zero-padded by one voxel (segauge pads before
    marching cubes): shape ``mask.shape + 1``, cell (i, j, k) spans padded voxels i..i+1, j.., k..
    and bit b of its code is corner ``CORNERS[b]``."""
    return _corner_codes(np.ascontiguousarray(mask if mask.dtype == np.bool_ else mask != 0).view(np.uint8))


@dataclass(frozen=True)
class Mesh:
    """One mask's marching-cubes surface (segauge's triangles), grouped by voxel cell.

    ``cells``: linear ids of the cells the surface crosses, ascending; ``cell_start``: the triangles
    of cells[c] are rows cell_start[c]:cell_start[c + 1] of ``tri`` (mm, coordinates of the padded
    array, as skimage returns them) and of ``entry`` (their row in ``config_table()``); ``grid``:
    cells per axis."""

    grid: tuple[int, int, int]
    cells: np.ndarray
    cell_start: np.ndarray
    tri: np.ndarray
    entry: np.ndarray

    def triangle_cells(self) -> np.ndarray:
        """Linear id of each triangle's cell."""
        return np.repeat(self.cells, np.diff(self.cell_start))


@numba.njit(cache=True, nogil=True)
def _surface_cells(flat: np.ndarray) -> np.ndarray:
    """Ascending positions in ``flat`` (corner codes) of the codes other than 0 and 255: the cells
    the surface crosses. Eight codes are read as one word, and a word of eight empty or eight full
    cells (most of a box) is passed over whole."""
    words = flat[: flat.size // 8 * 8].view(np.uint64)
    full = np.uint64(0xFFFFFFFFFFFFFFFF)
    n = 0
    for fill in range(2):  # count, then fill
        cells = np.empty(n, dtype=np.int64)
        n = 0
        for w in range(words.size + 1):  # the last "word" is the tail of fewer than 8 codes
            if w < words.size and (words[w] == 0 or words[w] == full):
                continue
            for idx in range(8 * w, min(8 * w + 8, flat.size)):
                if flat[idx] != 0 and flat[idx] != 255:
                    if fill:
                        cells[n] = idx
                    n += 1
    return cells


@numba.njit(cache=True, nogil=True)
def _mesh_arrays(codes: np.ndarray, table: np.ndarray, start: np.ndarray, half: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``Mesh`` arrays (cells, cell_start, tri, entry) of the surface cells of ``codes``, by lookup;
    ``half``: half the spacing."""
    flat = codes.ravel()
    cells = _surface_cells(flat)
    cell_start = np.zeros(len(cells) + 1, dtype=np.int64)
    for c in range(len(cells)):
        cell_start[c + 1] = cell_start[c] + start[flat[cells[c]] + 1] - start[flat[cells[c]]]
    tri, entry = np.empty((cell_start[-1], 3, 3)), np.empty(cell_start[-1], dtype=np.int64)
    n1, n2 = codes.shape[1], codes.shape[2]
    for c in range(len(cells)):
        idx, code = cells[c], flat[cells[c]]
        ijk = (idx // (n1 * n2), idx // n2 % n1, idx % n2)
        t = cell_start[c]
        for e in range(start[code], start[code + 1]):
            for v in range(3):
                for a in range(3):
                    tri[t, v, a] = (2 * ijk[a] + table[e, v, a]) * half[a]
            entry[t] = e
            t += 1
    return cells, cell_start, tri, entry


def surface_mesh(codes: np.ndarray, spacing: tuple[float, float, float]) -> Mesh:
    """The marching-cubes mesh of a mask from its cell codes (``cell_codes``), by table lookup."""
    table, start = config_table()
    cells, cell_start, tri, entry = _mesh_arrays(np.ascontiguousarray(codes), table, start, np.asarray(spacing, dtype=np.float64) / 2.0)
    return Mesh(grid=cast(tuple[int, int, int], tuple(int(n) for n in codes.shape)), cells=cells, cell_start=cell_start, tri=tri, entry=entry)


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
def _subdivide(tri: np.ndarray, f: int, max_edge: float, stack: np.ndarray, work: np.ndarray, centroid: np.ndarray, area: np.ndarray) -> int:
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


@numba.njit(cache=True)
def _split_faces(tri: np.ndarray, max_edge: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``_subdivide`` of every face of ``tri``: (start (F + 1,), centroids (S, 3), areas (S,)),
    the sub-faces of face f at rows start[f]:start[f + 1]."""
    stack, work = np.empty((STACK_SIZE, 9)), np.empty(18)
    start = np.zeros(len(tri) + 1, dtype=np.int64)
    for f in range(len(tri)):
        start[f + 1] = start[f] + _subdivide(tri, f, max_edge, stack, work, np.empty((0, 3)), np.empty(0))
    centroid, area = np.empty((start[-1], 3)), np.empty(start[-1])
    for f in range(len(tri)):
        _subdivide(tri, f, max_edge, stack, work, centroid[start[f] :], area[start[f] :])
    return start, centroid, area


@functools.cache
def subface_templates(spacing: tuple[float, float, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """segauge's sub-faces of every ``config_table()`` triangle at this spacing: (start, centroids
    relative to the cell's low corner (mm), areas), entry e's at rows start[e]:start[e + 1].

    Split exactly (trimesh 5.2's ``subdivide_to_size(min(spacing))``) on the exact cell geometry.
    segauge splits the same triangles at absolute float32 coordinates, so for an edge exactly as
    long as the smallest spacing its decision varies with rounding; such edges are not split here.
    """
    return _split_faces(np.ascontiguousarray(entry_triangles(spacing)), float(min(spacing)))
