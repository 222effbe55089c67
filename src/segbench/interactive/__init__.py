"""Interactive (box-and-click) evaluation of promptable models: the CVPR 2025 protocol (docs/interactive.md).

``protocol`` holds the rules as pure functions, ``cases`` the npz files and their validation,
``harness`` runs a model's command step by step and writes the per-case table and records.
"""
