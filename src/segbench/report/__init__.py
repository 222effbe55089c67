"""The leaderboard site: static HTML with plotly, generated from results JSON only.

Modules by job: ``site`` (build_site), ``pages`` (HTML pages), ``tables`` (sortable tables),
``figures`` (plotly figures), ``common`` (formats, model marks, verdicts), ``assets`` (CSS, JS).
"""

from segbench.report.site import build_site

__all__ = ["build_site"]
