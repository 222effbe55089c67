"""A DVC remote over SSH/SFTP: a real sshd on loopback, a real project pushed to it and pulled into a clone.

The clone's `dvc repro` then runs no stage and every output is the same file; the login key lives only in
each clone's `.dvc/config.local`, never in git.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from projects import SMALL, Projects
from services import sshd
from tests_support import commit_all
from tests_support import run_command as run

PIPELINE = ["data.dvc", "dvc.yaml"]  # the data and the main pipeline's outputs (the interactive pipeline is not run here)
OUTPUTS = ("predictions", "scores", "tracking", "results", "metrics", "plots", "site")

pytestmark = pytest.mark.slow


def _digests(project: Path) -> dict[Path, str]:
    """sha256 of every file the pipeline wrote, by path relative to the project."""
    files = (path for folder in OUTPUTS for path in (project / folder).rglob("*") if path.is_file())
    return {path.relative_to(project): hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


def test_push_to_ssh_remote_then_a_fresh_clone_pulls_and_reruns_nothing(projects: Projects, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"  # the client's ~/.ssh/known_hosts: DVC (asyncssh) verifies the server's host key
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    with sshd(tmp_path / "sshd") as server:
        (home / ".ssh" / "known_hosts").write_text(server.known_hosts_line + "\n")
        project = projects.copy(SMALL)  # the small experiment reproduced on its base commit
        store = tmp_path / "store"
        run(["dvc", "remote", "add", "-d", "ssh", server.url(store)], project)
        run(["dvc", "remote", "modify", "--local", "ssh", "keyfile", str(server.key)], project)
        run(["dvc", "push", *PIPELINE], project)
        commit_all(project, "outputs on the ssh remote")
        assert any((store / "files" / "md5").rglob("*")), "dvc push wrote nothing through sftp"
        committed = run(["git", "show", "HEAD:.dvc/config"], project)
        assert server.url(store) in committed and "keyfile" not in committed
        assert ".dvc/config.local" not in run(["git", "ls-files", ".dvc"], project).split()

        clone = tmp_path / "clone"
        run(["git", "clone", "-q", str(project), str(clone)], tmp_path)
        run(["dvc", "remote", "modify", "--local", "ssh", "keyfile", str(server.key)], clone)
        run(["dvc", "pull", *PIPELINE], clone)
        assert _digests(clone) == _digests(project)
        out = run(["dvc", "repro"], clone)
        assert "Running stage" not in out, out
        assert _digests(clone) == _digests(project)
        assert run(["git", "status", "--porcelain"], clone) == ""
