"""segbench: a reproducible, statistics-first benchmark for 3D medical image segmentation."""

import os
import platform

__version__ = "0.1.0"

# Byte-identical results on every x86-64 CPU (docs/methodology.md#6-reproducibility). OpenBLAS chooses its
# kernels by CPU, and its AVX-512 kernels add a bootstrap's sums in another order than its AVX2 (Haswell, also
# used on Zen) kernels, which moves the last bit of some means and CIs. The library reads this when numpy first
# loads it, so it is set here, before any segbench module imports numpy; an explicit setting is kept.
if platform.machine().lower() in ("x86_64", "amd64"):
    os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")
