"""The coverage policies (segbench.stats.missing_cases) on small hand-made rows: which rows each board and own-case analysis reads."""

from __future__ import annotations

import pandas as pd
import pytest

from segbench.stats import coverage


def rows(missing: dict[str, list[str]]) -> pd.DataFrame:
    """Rows of models a, b, c on cases 1-4, one structure; ``missing``: per model, the cases flagged prediction_missing."""
    return pd.DataFrame(
        [
            {"model": m, "case_id": c, "structure": "organ", "dice": 0.0 if c in missing.get(m, ()) else 0.9, "prediction_missing": c in missing.get(m, ())}
            for m in "abc"
            for c in "1234"
        ]
    )


def test_own_cases_keeps_the_board_of_the_complete_models_and_gives_each_other_its_cases() -> None:
    frame = rows({"c": ["3", "4"]})
    covered = coverage(frame, "own_cases")
    assert covered.block == {"policy": "own_cases", "applied": "own_cases", "n_cases": 4, "models": {"c": {"n_cases": 2, "of": 4, "missing": ["3", "4"]}}}
    assert sorted(set(covered.board(frame)["model"])) == ["a", "b"] and len(covered.board(frame)) == 8
    own = covered.own_cases(frame, "c")
    assert sorted(set(own["model"])) == ["a", "b", "c"] and sorted(set(own["case_id"])) == ["1", "2"]


def test_worst_case_keeps_every_row_and_shared_cases_drops_the_lacking_cases_for_everyone() -> None:
    frame = rows({"c": ["4"], "b": ["1"]})
    assert coverage(frame, "worst_case").board(frame).equals(frame)
    shared = coverage(frame, "shared_cases")
    assert sorted(set(shared.board(frame)["case_id"])) == ["2", "3"]
    assert shared.block["shared_cases"] == {"n_cases": 2, "dropped": ["1", "4"]}


def test_without_a_complete_model_own_cases_is_applied_as_shared_cases_and_says_so() -> None:
    frame = rows({"a": ["1"], "b": ["2"], "c": ["3"]})
    covered = coverage(frame, "own_cases")
    assert covered.block["policy"] == "own_cases" and covered.block["applied"] == "shared_cases"
    assert covered.block["reason"] == "no model covers every case"
    assert sorted(set(covered.board(frame)["case_id"])) == ["4"]


def test_without_a_case_every_model_covers_the_missing_cases_count_as_failures() -> None:
    frame = rows({"a": ["1", "2"], "b": ["3"], "c": ["4"]})
    for policy in ("own_cases", "shared_cases"):
        covered = coverage(frame, policy)
        assert covered.block["applied"] == "worst_case" and covered.block["reason"] == "no case is covered by every model"
        assert covered.board(frame).equals(frame)


def test_rows_without_a_missing_prediction_have_no_coverage_block_and_an_unknown_policy_is_an_error() -> None:
    frame = rows({})
    assert coverage(frame, "own_cases").block is None and coverage(frame, "own_cases").board(frame) is frame
    with pytest.raises(ValueError, match="unknown coverage policy 'drop'; known: own_cases, worst_case, shared_cases"):
        coverage(frame, "drop")
