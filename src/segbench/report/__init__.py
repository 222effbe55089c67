"""The leaderboard site: static HTML with plotly, generated from results JSON only."""

from segbench.report.site import build_site

__all__ = ["build_site"]
