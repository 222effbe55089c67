"""The projects the tests run segbench in, made in one place: a working folder (a params.yaml on this repo's data, for
stages called in-process), a new DVC project (this repo's pipeline files, the data pulled), and reproduced DVC projects,
each reproduced once per session and shared (``Projects.reproduced``) or copied for a test that changes it
(``Projects.copy``): a copy costs seconds, a `dvc repro` a minute or more.

A copy is independent of its source: MLflow keeps absolute paths in its SQLite store (each experiment's artifact
location, each run's artifact URI), which the copy rewrites to its own folder and then checks that no file of the copy
names the source (its data and DVC cache aside: content the source's path is no part of).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from segbench.config.validation import compose_params
from tests_support import commit_all, run_command

#: the small experiment the pipeline-level tests share (test_pipeline, test_dvc_views, test_mlflow_ui, test_slurm,
#: test_remote_ssh, test_predictions_folder): 4 real KiTS23 cases, 2 SIMULATED models, the small segauge-benchmark
#: published set, B = 500
SMALL_CASES = ["case_00030", "case_00110", "case_00210", "case_00425"]
SMALL_MODELS = ["sim_dilate_1mm", "sim_missed_lesion"]
SMALL_PUBLISHED = "segauge_kits23_seed"


@dataclass(frozen=True)
class Experiment:
    """A reproducible experiment: conf/ overrides as `dvc exp run -S` takes them, of the main pipeline (dvc.yaml) or,
    ``interactive``, of the interactive one (interactive/dvc.yaml)."""

    overrides: tuple[str, ...]
    interactive: bool = False

    @property
    def pipeline(self) -> list[str]:
        """The `dvc repro` target that reproduces it."""
        return ["interactive/dvc.yaml"] if self.interactive else []


SMALL = Experiment(
    (f"model=[{','.join(SMALL_MODELS)}]", f"dataset.kits23.cases=[{','.join(SMALL_CASES)}]", "stats.n_resamples=500", f"published=[{SMALL_PUBLISHED}]")
)

#: where the data lie: relative to a project, resolved into this repo's data/ for a working folder
_DATA_KEYS = ("path", "reference_dir", "metadata_file")
#: the parts of a copy not searched for the source's path: the pulled data and DVC's content-addressed cache (data),
#: git's compressed objects (the committed sources and params), and the MLflow store (checked by query: its freed
#: pages may keep the old bytes)
_UNSEARCHED = {Path("data"), Path(".dvc", "cache"), Path(".git", "objects")}


def working_folder(root: Path, folder: Path, overrides: list[str], published: dict[str, dict[str, Any]] | None = None) -> Path:
    """``folder`` as a project for stages called in-process (`segbench.cli.main` in it): a params.yaml composed from
    conf/ with ``overrides``, its data paths into ``root``'s data/, and data.dvc (the data version results record).

    ``published``: score sets selected in place of conf/'s, by configuration only (their paths absolute)."""
    raw = compose_params(root / "conf", overrides)
    if published is not None:
        raw["published"] = published
    for spec in [*raw["dataset"].values(), *raw["published"].values()]:
        for key in _DATA_KEYS:
            if spec.get(key) and not Path(spec[key]).is_absolute():
                spec[key] = str(root / spec[key])
        metadata = spec.get("metadata")
        if isinstance(metadata, dict) and not Path(metadata["path"]).is_absolute():  # a published set's metadata CSV
            metadata["path"] = str(root / metadata["path"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "params.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    shutil.copy(root / "data.dvc", folder / "data.dvc")
    return folder


def new_project(root: Path, proj: Path, overrides: list[str], interactive: bool = False) -> Path:
    """A new DVC project from this repo's pipeline files, data pulled from the shared remote, and a
    params.yaml composed from conf/ with ``overrides`` exactly as `dvc exp run -S` would.

    ``interactive``: with the interactive pipeline too (interactive/dvc.yaml). Off by default: a plain
    `dvc pull` fails on the outputs of a pipeline that never ran, as it would on any stage without a lock.
    """
    proj.mkdir(parents=True)
    for name in ("dvc.yaml", "data.dvc", ".gitignore", *(["interactive/dvc.yaml", "interactive/.gitignore"] if interactive else [])):
        (proj / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / name, proj / name)
    # the calibration audit's committed results, which the report stage draws a page from (its own pipeline is not copied)
    # hydra_plugins/: DVC loads it before composing conf/ for `dvc exp run -S` (the validation resolver)
    for name in ("conf", "hydra_plugins", "src", "calibration/results"):
        shutil.copytree(root / name, proj / name, ignore=shutil.ignore_patterns("__pycache__"))
    run_command(["git", "init", "-q"], proj)
    run_command(["dvc", "init", "-q"], proj)
    run_command(["dvc", "config", "hydra.enabled", "true"], proj)
    shutil.copy(root / ".dvcignore", proj / ".dvcignore")
    shutil.copytree(root / ".dvc" / "plots", proj / ".dvc" / "plots")  # the project's plot templates and offline page
    run_command(["dvc", "config", "plots.html_template", "plots/page.html"], proj)
    run_command(["dvc", "remote", "add", "-d", "shared", str((root.parent / "shared" / "dvc-remote").resolve())], proj)
    run_command(["dvc", "pull", "-q", "data.dvc"], proj)
    params = compose_params(proj / "conf", overrides)
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return proj


def copy_project(source: Path, target: Path) -> Path:
    """An independent copy of the DVC project ``source`` at ``target``: its files, git, DVC cache and MLflow store."""
    shutil.copytree(source, target, symlinks=True)
    store = target / "mlruns" / "mlflow.db"
    if store.exists():
        _move_store(store, str(source), str(target))
    named = [path.relative_to(target).as_posix() for path in _searched(target) if str(source).encode() in path.read_bytes()]
    assert not named, f"the copy of {source} at {target} still names the source in {named}"
    return target


def _move_store(db: Path, source: str, target: str) -> None:
    """Rewrite ``source`` to ``target`` in every text cell of the SQLite store ``db``; fail naming any cell left."""
    with contextlib.closing(sqlite3.connect(db)) as con, con:
        tables = [name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        cells = [(table, column) for table in tables for (_, column, *_) in con.execute(f'PRAGMA table_info("{table}")')]
        for table, column in cells:
            con.execute(
                f'UPDATE "{table}" SET "{column}" = replace("{column}", ?1, ?2) WHERE typeof("{column}") = \'text\' AND instr("{column}", ?1)', (source, target)
            )
        left = [
            f"{table}.{column}"
            for table, column in cells
            if con.execute(f'SELECT 1 FROM "{table}" WHERE instr(CAST("{column}" AS BLOB), CAST(?1 AS BLOB)) LIMIT 1', (source,)).fetchone()
        ]
    assert not left, f"{db} still names {source} in {left}"


def _searched(project: Path) -> list[Path]:
    """The files of ``project`` a copy is searched for its source's path in (all but ``_UNSEARCHED`` and the store)."""
    found = []
    for folder, dirs, files in os.walk(project):
        here = Path(folder)
        dirs[:] = [d for d in dirs if (here / d).relative_to(project) not in _UNSEARCHED]
        found += [here / name for name in files if name != "mlflow.db" and not (here / name).is_symlink()]
    return found


def _stamps(project: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file of ``project`` but DVC's own locks and temporary files (.dvc/tmp)."""
    tmp = project / ".dvc" / "tmp"
    files = (path for path in project.rglob("*") if path.is_file() and tmp not in path.parents)
    return {str(path.relative_to(project)): (path.stat().st_size, path.stat().st_mtime_ns) for path in files}


class Projects:
    """The session's project factory (the ``projects`` fixture): new DVC projects, and each experiment reproduced once."""

    def __init__(self, root: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.root = root
        self._tmp = tmp_path_factory
        self._reproduced: dict[Experiment, tuple[Path, dict[str, tuple[int, int]]]] = {}
        self._failed: dict[Experiment, str] = {}

    def new(self, overrides: list[str] | tuple[str, ...], interactive: bool = False) -> Path:
        """A new DVC project (``new_project``) in a folder of its own, nothing reproduced."""
        return new_project(self.root, self._tmp.mktemp("project") / "proj", list(overrides), interactive)

    def reproduced(self, experiment: Experiment) -> Path:
        """``experiment`` reproduced (on a first commit, "base", which its MLflow runs record), built on first use and
        shared from then on: for reading only (`dvc status`, `dvc metrics show`, a clone). A test that changes it takes
        a ``copy``: the session ends in an error naming any file something wrote to."""
        if experiment in self._failed:  # once: every test on it would otherwise spend minutes failing the same way
            pytest.fail(f"reproducing {experiment} failed earlier in this session:\n{self._failed[experiment]}")
        if experiment not in self._reproduced:
            try:
                proj = self.new(experiment.overrides, experiment.interactive)
                commit_all(proj, "base")
                run_command(["dvc", "repro", *experiment.pipeline], proj)
            except Exception as error:
                self._failed[experiment] = str(error)
                raise
            self._reproduced[experiment] = (proj, _stamps(proj))
        return self._reproduced[experiment][0]

    def copy(self, experiment: Experiment) -> Path:
        """A copy of ``experiment`` reproduced, independent of it and of every other copy: the test's to change."""
        return copy_project(self.reproduced(experiment), self._tmp.mktemp("copy") / "proj")

    def check_unchanged(self) -> None:
        """Fail naming every file of a shared reproduced project that was written, added or removed since it was built."""
        for proj, built in self._reproduced.values():
            now = _stamps(proj)
            changed = sorted(name for name in built.keys() | now.keys() if built.get(name) != now.get(name))
            assert not changed, f"tests wrote to the shared project {proj} (take Projects.copy to change one): {changed}"
