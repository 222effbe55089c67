"""The pipeline's stages, one module each (docs/methodology.md#1-pipeline-and-data-flow): ``predict``, ``score``,
``track``, ``compare`` (dvc.yaml), ``import_`` (published score sets), ``cases`` and ``interact`` (interactive/dvc.yaml),
``calibration_scores`` and ``calibration_audit`` (calibration/dvc.yaml); ``paths`` names the folders they share and
``bundles`` writes the score bundle three of them produce.

Each stage reads the files of the stage before it and writes its own outputs atomically, and each DVC stage depends
on exactly the source its command imports (tests/contracts/test_stage_dependencies.py derives it from the import graph). So this
package imports nothing here: a stage module loads only its own imports.
"""
