"""The base layer (docs/architecture.md#layers): what every other layer uses and which imports no other segbench layer.

- ``io``: atomic writes, digests and the recorded-files markers; ``json_fields``: typed reads of JSON fields;
- ``metrics``: the metric columns' kinds; ``rows``: the checks every long rows table passes; ``bands``: age bands;
- ``formats``: how every view prints a number; ``schema``: ``ConfigError`` and the helpers every section's schema uses.

The package imports nothing: each name is imported from the module that defines it.
"""
