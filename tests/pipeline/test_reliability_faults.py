"""Faults injected into copies of a reproduced project (docs/guide.md#reliability): a changed score bundle, MLflow
artifact or results file; a kill at the moment of each write; a damaged or missing tracking store behind DVC's run
cache; a run left RUNNING; a copied and a moved project; a full TMPDIR, project disk or artifacts folder. Each ends in
the committed outputs byte for byte, or in one line naming the file and the fix; never in a changed number on a
board. Real dvc, real SIGKILLs (tests/support/gate), a real tmpfs."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from projects import SMALL, SMALL_MODELS, Projects, copy_project
from segbench.base import rows
from segbench.console import full_disk_line
from segbench.tracking import runs as tracking
from tests_support import command_env, commit_all, gate_env, kill_at_gate, run_command

pytestmark = pytest.mark.slow

MODEL = SMALL_MODELS[0]
SCORE_STAGE = f"score@kits23-{MODEL}"


@pytest.fixture
def fresh_copy(projects: Projects) -> Path:
    """A copy of the small experiment reproduced, everything committed: `git status` starts clean."""
    proj = projects.copy(SMALL)
    commit_all(proj, "reproduced")
    return proj


def _outputs(proj: Path) -> dict[str, bytes]:
    """The bytes of every file the compare and report stages write (results, metrics, plots, site)."""
    return {
        str(p.relative_to(proj)): p.read_bytes()
        for folder in ("results", "metrics", "plots", "site")
        for p in sorted((proj / folder).rglob("*"))
        if p.is_file()
    }


def _fails(args: list[str], proj: Path, env: dict[str, str] | None = None) -> str:
    """Run a command that must fail; its stderr, which must hold no traceback."""
    result = subprocess.run(args, cwd=proj, env=env or command_env(), capture_output=True, text=True, check=False)
    assert result.returncode != 0, f"{' '.join(args)} succeeded:\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result.stderr


def _segbench_error(stderr: str, command: str) -> str:
    """The one line of ``segbench <command>: error: ...`` in ``stderr``."""
    (line,) = [line for line in stderr.splitlines() if line.startswith(f"segbench {command}: error: ")]
    return line


def _clean(proj: Path) -> None:
    """Nothing for git to add and nothing for DVC to rerun."""
    assert run_command(["git", "status", "--porcelain"], proj).strip() == ""
    assert "Data and pipelines are up to date" in run_command(["dvc", "status", "dvc.yaml"], proj)


def _flip_first(path: Path, column: str) -> tuple[int, str]:
    """Flip one bit of the first cell of ``column`` that starts with 0 (0.95... -> 1.95...); its line and new value."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    index = lines[0].rstrip("\n").split(",").index(column)
    for number, line in enumerate(lines[1:], 2):
        cells = line.split(",")
        if cells[index].startswith("0."):
            cells[index] = "1" + cells[index][1:]
            lines[number - 1] = ",".join(cells)
            path.write_text("".join(lines), encoding="utf-8")
            return number, cells[index]
    raise AssertionError(f"{path}: no {column} cell below 1")


def test_the_range_of_each_metric_is_checked_naming_file_line_and_value(touchstone_rows) -> None:
    """One rule per column (segbench.base.rows): fractions in [0, 1], distances finite and >= 0, counts whole, flags
    True or False; the first refused cell named by line, identity and value."""
    table = touchstone_rows.head(20).reset_index(drop=True).copy()
    assert rows.check_rows(table, "t.csv", "fix") is table
    for column, value, expected in (
        ("dice", 1.9549, "a number in [0, 1]"),
        ("hd95", -2.0, "a finite number >= 0"),
        ("hd95", float("inf"), "a finite number >= 0"),
        ("n_reference", 2.5, "a whole number >= 0"),
    ):
        bad = table.copy()
        bad[column] = 0.5 if column != "n_reference" else 1.0
        bad.loc[3, column] = value
        with pytest.raises(rows.RowsError) as caught:
            rows.check_rows(bad, "t.csv", "the fix")
        who = f"model {bad.loc[3, 'model']!r}, case_id {bad.loc[3, 'case_id']!r}, structure {bad.loc[3, 'structure']!r}"
        assert str(caught.value) == f"t.csv: line 5 ({who}), column {column!r}: {value!r} is not {expected}; refused, no board is computed from it: the fix"
    flags = table.assign(reference_present=["yes", *table["reference_present"][1:]])
    assert "column 'reference_present': 'yes' is not True or False" in rows.row_problems(flags)[0]


def test_scored_rows_out_of_range_are_never_written(touchstone_rows, tmp_path: Path) -> None:
    """The score bundle's writer (the score and import stages) refuses rows with a value out of its metric's range,
    naming the file, line and value, and writes no file of the bundle."""
    table = touchstone_rows.head(5).reset_index(drop=True).copy()
    table.loc[2, "dice"] = 1.5
    out = tmp_path / "bundle"
    with pytest.raises(rows.RowsError, match=r"bundle/per_case\.csv: line 4 \(.*\), column 'dice': 1\.5 is not a number in \[0, 1\]; refused"):
        tracking.ScoreBundle.write(out, table, {})
    assert not out.exists() or not list(out.iterdir())


def test_a_changed_score_bundle_is_refused_and_its_stage_writes_it_again(fresh_copy: Path, tmp_path: Path) -> None:
    """30 lines dropped, or one bit flipped (Dice 0.9... -> 1.9...): track refuses, and so does compare when it must
    log the bundle's run again (a store without it, as on a new machine after `dvc pull`), naming the file and the score
    stage whose output is authoritative; following that advice gives the committed outputs back. Compare reads a bundle
    only then: with the run in the store, its rows come from the store and the board is the committed one."""
    before = _outputs(fresh_copy)
    relative = Path("scores", "kits23", MODEL, "per_case.csv")
    table = fresh_copy / relative
    original = table.read_bytes()
    lines = original.decode().splitlines(keepends=True)
    table.write_text("".join(lines[:1] + lines[1 + min(30, len(lines) - 2) :]), encoding="utf-8")
    (tmp_path / "mlruns").mkdir()
    new_machine = {**command_env(), "SEGBENCH_TRACKING_URI": f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"}  # a store lacking every run
    for command, env in ((["track", "--dataset", "kits23", "--model", MODEL], None), (["compare", "--dataset", "kits23"], new_machine)):
        line = _segbench_error(_fails(["segbench", *command], fresh_copy, env), command[0])
        assert f"{relative}: not the file stage {SCORE_STAGE} wrote" in line and f"`dvc repro -f -s {SCORE_STAGE}` writes it again" in line, line
    run_command(["segbench", "compare", "--dataset", "kits23"], fresh_copy)
    assert _outputs(fresh_copy) == before
    table.write_bytes(original)
    _flip_first(table, "dice")
    line = _segbench_error(_fails(["segbench", "track", "--dataset", "kits23", "--model", MODEL], fresh_copy), "track")
    assert f"{relative}: not the file stage {SCORE_STAGE} wrote" in line, line
    run_command(["dvc", "repro", "-f", "-s", SCORE_STAGE], fresh_copy)
    assert table.read_bytes() == original
    run_command(["dvc", "repro"], fresh_copy)
    assert _outputs(fresh_copy) == before
    _clean(fresh_copy)


def _model_run_artifact(proj: Path, name: str) -> Path:
    """The file ``name`` of the model run of MODEL on kits23 in the project's store."""
    query = (
        "SELECT r.artifact_uri FROM runs r JOIN experiments e USING (experiment_id) WHERE e.name = 'segbench/kits23' AND r.name = ? AND r.status = 'FINISHED'"
    )
    with contextlib.closing(sqlite3.connect(proj / "mlruns" / "mlflow.db")) as db:
        (uri,) = db.execute(query, (MODEL,)).fetchone()
    return Path(urlparse(uri).path) / name


def test_a_changed_mlflow_artifact_is_refused_and_logged_again_from_its_bundle(fresh_copy: Path) -> None:
    """A bit flipped in the per-case table a model run holds: compare refuses, naming the artifact, the line and the
    value; deleting that run as told logs it again from the score bundle, and the board is the committed one."""
    before = _outputs(fresh_copy)
    artifact = _model_run_artifact(fresh_copy, "per_case.csv")
    number, value = _flip_first(artifact, "dice")
    line = _segbench_error(_fails(["dvc", "repro", "-f", "-s", "compare@kits23"], fresh_copy), "compare")
    assert f"{artifact.as_uri()}: line {number}" in line and f"column 'dice': {float(value)!r} is not a number in [0, 1]" in line, line
    delete = line.split("`")[1]  # MLFLOW_TRACKING_URI=... mlflow runs delete --run-id ...
    variable, command = delete.split(" ", 1)
    run_command(command.split(), fresh_copy, env={**command_env(), variable.split("=", 1)[0]: variable.split("=", 1)[1]})
    run_command(["dvc", "repro", "-f", "-s", "compare@kits23"], fresh_copy)
    assert _outputs(fresh_copy) == before


def _cache_object(proj: Path, md5: str) -> Path:
    return proj / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]


def test_a_results_file_that_is_not_what_compare_wrote_is_refused_by_every_reader(fresh_copy: Path) -> None:
    """One byte changed in the DVC cache object of results/kits23.json, then `dvc checkout`: show, report and
    export refuse it naming the file and `dvc repro -f -s compare@kits23`, which gives the committed file back; a
    results file dvc.lock records but the folder lacks is named by show, never skipped."""
    results = fresh_copy / "results" / "kits23.json"
    before = results.read_bytes()
    lock = yaml.safe_load((fresh_copy / "dvc.lock").read_text())
    (md5,) = [o["md5"] for o in lock["stages"]["compare@kits23"]["outs"] if o["path"] == "results/kits23.json"]
    cached = _cache_object(fresh_copy, md5)
    changed = before.replace(b'"mean": 0.', b'"mean": 1.', 1)
    assert changed != before
    cached.chmod(0o644)
    cached.write_bytes(changed)
    results.unlink()
    run_command(["dvc", "checkout", "results/kits23.json"], fresh_copy)
    assert results.read_bytes() == changed
    for command in (
        ["show"],
        ["show", "kits23"],
        ["export", "--dataset", "kits23", "--format", "generic_csv", "--out", "out.csv"],
        ["report", "--results", "results", "--out", "site2"],
    ):
        line = _segbench_error(_fails(["segbench", *command], fresh_copy), command[0])
        assert "results/kits23.json: not the file stage compare@kits23 wrote" in line and "`dvc repro -f -s compare@kits23`" in line, line
    cached.unlink()  # the damaged copy goes; compare writes the bytes again
    run_command(["dvc", "repro", "-f", "-s", "compare@kits23"], fresh_copy)
    assert results.read_bytes() == before
    assert "KiTS23" in run_command(["segbench", "show", "kits23"], fresh_copy)
    results.unlink()
    line = _segbench_error(_fails(["segbench", "show"], fresh_copy), "show")
    assert line.startswith(f"segbench show: error: results/kits23.json: missing, though {fresh_copy / 'dvc.lock'} records it"), line
    run_command(["dvc", "checkout", "results/kits23.json"], fresh_copy)


@pytest.mark.parametrize(
    "write, pattern, stage",
    [
        ("results", ".kits23.json.partial-*", "compare@kits23"),
        ("metrics", ".dice.json.partial-*", "compare@kits23"),
        ("plots", ".kits23.csv.partial-*", "compare@kits23"),
        ("site", ".*.html.partial-*", "report"),
    ],
)
def test_a_kill_at_each_write_leaves_no_debris(fresh_copy: Path, tmp_path: Path, write: str, pattern: str, stage: str) -> None:
    """SIGKILL at the moment compare or report creates the temporary of a results, metrics, plots or site file: a
    plain `dvc repro` then leaves the committed outputs, a clean `git status` and a clean `dvc status`."""
    before = _outputs(fresh_copy)
    pattern = f"*/.dvc/tmp/segbench-partial/{pattern}"
    # passes=1: the first open creates the temporary (mkstemp), the second one writes into it
    held = kill_at_gate(["dvc", "repro", "-f", "-s", stage], fresh_copy, gate_env(tmp_path / "gate", pattern, passes=1), pattern)
    assert Path(held).exists()  # the killed writer's temporary, in DVC's scratch folder
    run_command(["dvc", "repro"], fresh_copy)
    assert _outputs(fresh_copy) == before
    _clean(fresh_copy)


def test_a_damaged_tracking_store_is_named_in_one_line_and_rebuilt_from_the_bundles(fresh_copy: Path) -> None:
    """mlflow.db truncated to half: compare fails in one line naming the file and the fix; following it logs every
    run again from the score bundles and writes the committed results."""
    before = _outputs(fresh_copy)
    db = fresh_copy / "mlruns" / "mlflow.db"
    with open(db, "r+b") as stream:
        stream.truncate(db.stat().st_size // 2)
    line = _segbench_error(_fails(["dvc", "repro", "-f", "-s", "compare@kits23"], fresh_copy), "compare")
    assert line.startswith(f"segbench compare: error: {db}: the MLflow tracking store cannot be read"), line
    for command in line.split("`")[1::2]:
        run_command(["bash", "-c", command], fresh_copy)
    assert _outputs(fresh_copy) == before
    with contextlib.closing(sqlite3.connect(db)) as connection:
        names = {name for (name,) in connection.execute("SELECT name FROM runs WHERE status = 'FINISHED'")}
    assert set(SMALL_MODELS) | {"leaderboard"} <= names


def test_compare_reruns_rather_than_restoring_from_dvc_s_run_cache(fresh_copy: Path) -> None:
    """A plain `dvc repro` that must make results/kits23.json again runs compare, which opens the store, instead of
    restoring it from DVC's run cache (its outputs `persist`): a damaged store is named in one line; a missing one is
    logged again from the score bundles, the outputs the committed ones."""
    before = _outputs(fresh_copy)
    store = fresh_copy / "mlruns"
    db = store / "mlflow.db"
    with open(db, "r+b") as stream:
        stream.truncate(db.stat().st_size // 2)
    (fresh_copy / "results" / "kits23.json").unlink()
    line = _segbench_error(_fails(["dvc", "repro"], fresh_copy), "compare")
    assert line.startswith(f"segbench compare: error: {db}: the MLflow tracking store cannot be read"), line
    shutil.rmtree(store)
    run_command(["dvc", "repro"], fresh_copy)
    assert _outputs(fresh_copy) == before
    with contextlib.closing(sqlite3.connect(db)) as connection:
        names = {name for (name,) in connection.execute("SELECT name FROM runs WHERE status = 'FINISHED'")}
    assert set(SMALL_MODELS) | {"leaderboard"} <= names
    _clean(fresh_copy)


def test_a_run_left_running_by_a_killed_track_is_marked_failed_by_the_next_stage(fresh_copy: Path, tmp_path: Path) -> None:
    """`segbench track` killed while its run is RUNNING (copying the table into the run): the next stage that opens
    the store marks that run FAILED, naming it in a warning."""
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    env = {**gate_env(tmp_path / "gate", "*/artifacts/per_case.csv", argv="track"), "SEGBENCH_TRACKING_URI": uri}
    kill_at_gate(["segbench", "track", "--dataset", "kits23", "--model", MODEL], fresh_copy, env, "track copying its table")
    query = "SELECT name, status FROM runs"
    with contextlib.closing(sqlite3.connect(tmp_path / "store" / "mlflow.db")) as db:
        assert db.execute(query).fetchall() == [(MODEL, "RUNNING")]
    log = run_command(["segbench", "track", "--dataset", "kits23", "--model", SMALL_MODELS[1]], fresh_copy, tracking_uri=uri)
    assert "was left RUNNING by process" in log and "marked FAILED" in log, log
    with contextlib.closing(sqlite3.connect(tmp_path / "store" / "mlflow.db")) as db:
        assert sorted(db.execute(query).fetchall()) == [(MODEL, "FAILED"), (SMALL_MODELS[1], "FINISHED")]
    assert tracking.WRITER_TAG not in run_command(["segbench", "show", "kits23", "--format", "json"], fresh_copy)


def _stamps(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


def test_a_copied_or_moved_project_writes_and_reads_only_its_own_store(projects: Projects, tmp_path: Path) -> None:
    """`cp -a` of a reproduced project, a forced compare there, then `mv` of the copy and a forced compare again: each
    logs into and reads from its own mlruns/, the original's store untouched, the results the same bytes."""
    source = projects.reproduced(SMALL)
    stamps = _stamps(source / "mlruns")
    copy = tmp_path / "copy"
    run_command(["cp", "-a", str(source), str(copy)], tmp_path)
    run_command(["dvc", "repro", "-f", "-s", "compare@kits23"], copy)
    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    run_command(["mv", str(copy), str(moved)], tmp_path)
    run_command(["dvc", "repro", "-f", "-s", "compare@kits23"], moved)
    assert (moved / "results" / "kits23.json").read_bytes() == (source / "results" / "kits23.json").read_bytes()
    assert _stamps(source / "mlruns") == stamps
    with contextlib.closing(sqlite3.connect(moved / "mlruns" / "mlflow.db")) as db:
        places = [uri for (uri,) in db.execute("SELECT artifact_uri FROM runs")]
        places += [uri for (uri,) in db.execute("SELECT artifact_location FROM experiments WHERE name LIKE 'segbench/%'")]
    assert places and all(urlparse(uri).path.startswith(str(moved / "mlruns" / "artifacts")) for uri in places), places


def _tmpfs(folder: Path, size: str) -> None:
    """A tmpfs of ``size`` mounted at ``folder`` (made here), or the test skipped saying why."""
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, check=False).returncode:
        pytest.skip("mounting a tmpfs needs root (mount -t tmpfs)")


def test_a_full_tmpdir_is_one_line_naming_the_folder(fresh_copy: Path, tmp_path: Path) -> None:
    """TMPDIR on a 4 kB tmpfs (compare downloads each run's table there): one line naming the folder and the bytes
    free, no traceback; the leaderboard's outputs are the committed ones after a rerun with room."""
    before = _outputs(fresh_copy)
    full = tmp_path / "full"
    _tmpfs(full, "4k")
    try:
        line = _segbench_error(_fails(["segbench", "compare", "--dataset", "kits23"], fresh_copy, env={**command_env(), "TMPDIR": str(full)}), "compare")
    finally:
        subprocess.run(["umount", str(full)], check=True)
    assert f"no space left on the device of {full} (" in line and "bytes needed to download" in line and "bytes free there" in line, line
    run_command(["dvc", "repro"], fresh_copy)
    assert _outputs(fresh_copy) == before
    _clean(fresh_copy)


def test_a_full_disk_error_naming_no_file_is_one_line_when_no_temporary_folder_is_usable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's "no space left" names no file, and on a full machine every folder ``tempfile.gettempdir()`` would probe
    is full too (it then raises, as it did on a CI machine whose disk the tests had filled): the line still names TMPDIR's
    full filesystem, built without that probe."""
    full = tmp_path / "full"
    _tmpfs(full, "4k")
    try:
        _fill(full, 0)
        monkeypatch.setenv("TMPDIR", str(full))
        monkeypatch.setattr(tempfile, "tempdir", None)

        def no_usable_folder() -> str:
            raise FileNotFoundError(errno.ENOENT, f"No usable temporary directory found in {[str(full), '/tmp']}")

        monkeypatch.setattr(tempfile, "gettempdir", no_usable_folder)
        line = full_disk_line(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    finally:
        subprocess.run(["umount", str(full)], check=True)
    assert line.startswith(f"no space left on the device of {full} (0 bytes free there); ") and f"TMPDIR={full}:" in line, line


def _fill(disk: Path, leave: int) -> Path:
    """A file taking all but ``leave`` bytes of the filesystem ``disk``."""
    filler = disk / "filler"
    with open(filler, "wb") as stream:
        os.posix_fallocate(stream.fileno(), 0, shutil.disk_usage(disk).free - leave)
    return filler


def _statuses(db: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(db)) as connection:
        return {status for (status,) in connection.execute("SELECT status FROM runs")}


def test_a_full_project_disk_is_one_line_naming_it_and_loses_nothing(projects: Projects, tmp_path: Path) -> None:
    """The project on a tmpfs with 200 kB left: compare writing results/kits23.json, and track creating a store,
    each fail in one line naming the filesystem's folder, the file and (for results) the bytes needed; the committed
    results stay, no run stays RUNNING, no temporary stays; with room again a plain `dvc repro` gives the committed
    outputs and a clean project."""
    disk = tmp_path / "disk"
    _tmpfs(disk, "512m")
    try:
        project = copy_project(projects.reproduced(SMALL), disk / "proj")
        commit_all(project, "reproduced")
        before = _outputs(project)
        filler = _fill(disk, 200_000)
        line = _segbench_error(_fails(["dvc", "repro", "-f", "-s", "compare@kits23"], project), "compare")
        assert line.startswith(f"segbench compare: error: no space left on the device of {disk} (") and "bytes needed" in line, line
        assert "writing results/kits23.json" in line, line
        assert (project / "results" / "kits23.json").read_bytes() == before["results/kits23.json"]
        assert not list((project / ".dvc" / "tmp" / "segbench-partial").iterdir())
        assert "RUNNING" not in _statuses(project / "mlruns" / "mlflow.db")
        filler.unlink()
        shutil.rmtree(project / "mlruns")
        filler = _fill(disk, 200_000)
        line = _segbench_error(_fails(["segbench", "track", "--dataset", "kits23", "--model", MODEL], project), "track")
        store = project / "mlruns" / "mlflow.db"
        assert line.startswith(f"segbench track: error: no space left on the device of {disk} (") and f"writing {store}" in line, line
        filler.unlink()
        run_command(["dvc", "repro"], project)
        assert _outputs(project) == before
        assert _statuses(store) == {"FINISHED"}
        _clean(project)
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


def test_a_full_artifacts_folder_is_one_line_and_keeps_no_half_copied_table(fresh_copy: Path, tmp_path: Path) -> None:
    """The store's artifacts folder on an 8 kB tmpfs: track fails in one line naming that folder, the file it copies
    into it (not the one it copies from) and the bytes that needs; its run is marked FAILED and no half-copied table
    stays."""
    store = tmp_path / "store"
    store.mkdir()
    _tmpfs(store / "artifacts", "8k")
    try:
        env = {**command_env(), "SEGBENCH_TRACKING_URI": f"sqlite:///{store / 'mlflow.db'}"}
        line = _segbench_error(_fails(["segbench", "track", "--dataset", "kits23", "--model", MODEL], fresh_copy, env), "track")
        assert re.match(
            rf"segbench track: error: no space left on the device of {re.escape(str(store / 'artifacts'))} \(\d+ bytes needed, "
            rf"\d+ bytes free there, writing {re.escape(str(store / 'artifacts'))}/",
            line,
        ), line
        assert _statuses(store / "mlflow.db") == {"FAILED"}
        assert not [path for path in (store / "artifacts").rglob("*") if path.is_file()]
    finally:
        subprocess.run(["umount", str(store / "artifacts")], check=True)
