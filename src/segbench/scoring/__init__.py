"""Scoring engine: the metrics of docs/methodology.md#3-metric-conventions per case and region under a metric-definition profile, fast and parallel.

The package imports nothing: each name is imported from the module that defines it, so a module's imports (and a
stage's DVC dependencies) name the code it runs, and importing the light ``settings`` does not load numba.

- ``settings``: regions, metric names and directions, profile names, the lesion setting (what a configuration needs);
- ``engine``: ``score_case`` / ``score_cases`` (per-case rows, ``COLUMNS``), in a process pool;
- ``labelmaps``: reading NIfTI, NumPy and DICOM label maps with bounds; ``geometry``: grid checks and resampling;
- ``profiles``: the metric-definition profiles (segauge, DeepMind, MeshMetrics, MONAI, panoptica);
- ``surface`` and ``surface_summaries``: segauge's surface distances, compiled, and the metrics pooled from them;
  ``surfacenets``: MeshMetrics' surface distances;
- ``instances`` and ``lesionwise``: lesion-wise matching and scores.
"""
