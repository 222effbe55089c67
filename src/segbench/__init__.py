"""segbench: a reproducible, statistics-first benchmark for 3D medical image segmentation."""

import os
import platform

__version__ = "0.1.0"

# Byte-identical results on every x86-64 CPU (docs/methodology.md#6-reproducibility). OpenBLAS and numpy choose
# their kernels by CPU, and their AVX-512 kernels add in another order than their AVX2 ones, which moves the last
# bit of some means, CIs and moments (measured: Touchstone's CIs and the calibration audit's skewness). Both read
# these when numpy is first imported, so they are set here, before any segbench module imports numpy; explicit
# settings are kept. numpy ignores the names it does not know (older releases named the AVX-512 groups otherwise).
_AVX512 = "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR X86_V4"
if platform.machine().lower() in ("x86_64", "amd64"):
    os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")
    os.environ.setdefault("NPY_DISABLE_CPU_FEATURES", _AVX512)


def __getattr__(name: str) -> object:
    """``segbench.evaluate`` and ``segbench.Evaluation`` (``segbench.evaluation``), imported on first use: ``import segbench``
    stays light and sets the environment above before numpy loads."""
    if name in ("evaluate", "Evaluation"):
        from segbench import evaluation

        return getattr(evaluation, name)
    raise AttributeError(f"module 'segbench' has no attribute {name!r}")
