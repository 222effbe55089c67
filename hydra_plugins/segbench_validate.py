"""Loaded by DVC before it composes conf/ for ``dvc exp run -S`` (its ``hydra.plugins_path``, default the repo root).

Hydra imports every module of the ``hydra_plugins`` namespace; this one registers the ``${segbench.validate:}``
resolver of conf/config.yaml, so DVC's own composition validates the parameters (segbench.config.parse_params)
and a typo fails before any stage runs.
"""

from segbench.config import register_validation

register_validation()
