"""Published per-case score sets: ``schema`` (the ``published:`` section's schema, light: the configuration imports
it), ``readers`` (a set's files -> the long rows table, by its format) and ``segauge`` (segauge's results files).

The package imports nothing, so importing the schema loads no reader.
"""
