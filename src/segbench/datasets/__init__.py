"""Datasets: which cases exist, where their reference label maps are, and their clinical metadata.

``schema.py`` holds a dataset's configuration (light: the configuration imports it), ``cases.py`` its cases and
metadata (pandas), ``download.py`` and ``dicom_series.py`` how its files are fetched and read. Import from the
module that holds a name: this package re-exports nothing, so importing the schema loads nothing else.
"""
