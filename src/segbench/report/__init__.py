"""The leaderboard site: static HTML with plotly, generated from results JSON only.

Modules by job: ``site`` (build_site), ``pages`` (HTML pages), ``tables`` (sortable tables),
``figures`` (plotly figures), ``numbers`` (how a number is printed), ``marks`` (what stands beside a model's name),
``pairs`` (the verdicts' words), ``audit`` (the audit's rates), ``document`` and ``markup`` (shared names and HTML), ``assets`` (CSS, JS),
``summary`` (the leaderboard for MLflow: headline metrics, its table, the runs view). The compare stage logs
``standalone_dataset_page`` and the summary to MLflow.
"""

from segbench.report.pages import standalone_dataset_page
from segbench.report.site import build_site
from segbench.report.summary import leaderboard_table, summary_metrics, summary_params, summary_tags, view_columns

__all__ = ["build_site", "leaderboard_table", "standalone_dataset_page", "summary_metrics", "summary_params", "summary_tags", "view_columns"]
