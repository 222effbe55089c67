"""The assembly layer (docs/architecture.md#layers): outputs put together from the engines, readers and inputs, below
the stages that call them: ``results_document`` (a leaderboard's results file), ``calibration`` and
``calibration_schema`` (the calibration audit's population and its section), ``crossdataset`` (one model on two
datasets), ``export`` (rows to challengeR's and generic CSVs) and ``pruning`` (``segbench prune-runs``).

The package imports nothing: each name is imported from the module that defines it.
"""
