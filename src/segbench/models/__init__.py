"""Model adapters: each model runs as a subprocess with its own command (docs/methodology.md#2-model-kinds)."""
