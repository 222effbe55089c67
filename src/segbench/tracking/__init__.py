"""The tracking engine: ``runs`` moves per-case rows in and out of MLflow and publishes the leaderboards there.

The package imports nothing: each name is imported from the module that defines it.
"""
