"""A dataset's metadata file (datasets/cases.py): a file its reader cannot read is an error naming the file and why,
never a bare decoding error or a table whose rows describe the wrong cases."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from repo_paths import ROOT
from segbench.base.schema import ConfigError
from segbench.config.params import dataset_from_conf
from segbench.datasets.cases import load_metadata

KITS_RECORD = (
    '{"case_id": "case_00000", "gender": "female", "age_at_nephrectomy": 50, "bmi": 30.1, "malignant": true, '
    '"tumor_histologic_subtype": "clear_cell_rcc", "pathology_t_stage": "1a"}'
)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (f"[{KITS_RECORD}]".replace("female", "f\xe9male").encode("latin-1"), "can't decode byte 0xe9"),
        (b'[{"case_id": ', "Expecting value"),
        (b'{"case_id": "case_00000"}', "not a list of objects with a case_id each"),
        (b'[{"id": "case_00000"}]', "not a list of objects with a case_id each"),
        (b"[" * 100_000 + b"]" * 100_000, "recursion"),
        (f"[{KITS_RECORD}, {KITS_RECORD}]".encode(), "more than one row for 1 case(s): ['case_00000']"),
    ],
)
def test_an_unreadable_kits23_metadata_file_is_named(tmp_path: Path, content: bytes, why: str) -> None:
    path = tmp_path / "kits23.json"
    path.write_bytes(content)
    dataset = dataclasses.replace(dataset_from_conf(ROOT / "conf", "kits23", ROOT), metadata_file=path)
    with pytest.raises(ConfigError, match="metadata file") as error:
        load_metadata(dataset, ["case_00000"])
    assert str(path) in str(error.value) and why in str(error.value)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("image_id;age;gender\ns0001;50;f\xe9\n".encode("latin-1"), "can't decode byte 0xe9"),
        (b"id;age;gender\ns0001;50;f\n", "no image_id column"),
        (b"", "No columns to parse"),
        (b"image_id;age;gender\ns0001;50;f\ns0001;51;m\n", "more than one row for 1 case(s): ['s0001']"),
    ],
)
def test_an_unreadable_totalsegmentator_metadata_file_is_named(tmp_path: Path, content: bytes, why: str) -> None:
    path = tmp_path / "meta.csv"
    path.write_bytes(content)
    dataset = dataclasses.replace(dataset_from_conf(ROOT / "conf", "totalsegmentator", ROOT), metadata_file=path, metadata_fields=("age", "gender"))
    with pytest.raises(ConfigError, match="metadata file") as error:
        load_metadata(dataset, ["s0001"])
    assert str(path) in str(error.value) and why in str(error.value)


def test_a_readable_metadata_file_gives_its_cases_fields(tmp_path: Path) -> None:
    path = tmp_path / "meta.csv"
    path.write_bytes("\ufeffimage_id;age;gender\ns0001;50;f\ns0002;71;m\n".encode())
    dataset = dataclasses.replace(dataset_from_conf(ROOT / "conf", "totalsegmentator", ROOT), metadata_file=path, metadata_fields=("age", "gender"))
    table = load_metadata(dataset, ["s0002", "s0003"])
    assert table.loc["s0002", "meta.gender"] == "m" and table.loc["s0002", "meta.age_band"] == "70-79"
    assert table.loc["s0003"].isna().all()  # a case the file lacks has no metadata (its subgroups count it as missing)
