"""The configuration: ``params`` (params.yaml composed by Hydra and checked section by section, light: every stage
imports it), ``stats_settings`` (the statistics settings, by the engine's rules) and ``validation`` (the whole
composition checked: DVC's Hydra resolver and ``segbench params``).

The package imports nothing, so importing ``params`` loads neither the statistics engine nor the validation.
"""
