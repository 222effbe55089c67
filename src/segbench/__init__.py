"""segbench: a reproducible, statistics-first benchmark for 3D medical image segmentation."""

__version__ = "0.1.0"
