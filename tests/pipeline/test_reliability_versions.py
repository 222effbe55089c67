"""The git commit every result records: HEAD, marked when tracked files differ from it."""

from __future__ import annotations

from pathlib import Path

from segbench.tracking.runs import git_commit
from tests_support import commit_all, in_directory, run_command


def test_git_commit_is_head_and_says_when_the_tree_differs(tmp_path: Path) -> None:
    run_command(["git", "init", "-q"], tmp_path)
    with in_directory(tmp_path):
        assert git_commit() == "unknown"  # no commit yet: not the word HEAD
        (tmp_path / "params.yaml").write_text("a: 1\n")
        (tmp_path / "dvc.lock").write_text("stages: {}\n")
        commit_all(tmp_path, "base")
        head = run_command(["git", "rev-parse", "HEAD"], tmp_path).strip()
        assert git_commit() == head
        (tmp_path / "dvc.lock").write_text("stages: {score: {}}\n")  # dvc repro rewrites it between stages
        (tmp_path / "scratch.txt").write_text("untracked\n")
        assert git_commit() == head
        (tmp_path / "params.yaml").write_text("a: 2\n")  # as `dvc exp run -S a=2` does before running
        assert git_commit() == f"{head}-dirty"
