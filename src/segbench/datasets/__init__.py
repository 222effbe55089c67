"""Datasets: which cases exist, where their reference label maps are, and their clinical metadata."""

from segbench.datasets.cases import CaseList, case_ids, data_version, load_metadata, reference_path

__all__ = ["CaseList", "case_ids", "data_version", "load_metadata", "reference_path"]
