"""What the ``segbench`` command writes to a terminal: text made printable (a name read from a team's file can neither
drive the terminal nor reorder a line) and a full disk said in one line naming the filesystem, the bytes free there and
what to do.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from pathlib import Path

#: C0 and C1 control characters but newline and tab, and the bidirectional overrides and isolates (which reorder how the
#: rest of a line reads)
_CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` for a terminal: each control character but newline and tab written as its escape (ESC as ``\\x1b``), so
    that a name taken from a file (a team's stray prediction, a published model) can neither drive the terminal that
    shows it (clear it, retitle it) nor hide or reorder words (a carriage return writing over its line, a right-to-left
    override)."""
    return _CONTROL_CHARACTERS.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), text)


class PrintableFormatter(logging.Formatter):
    """Log lines through :func:`printable`: warnings name files of a team's folder."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


def full_disk(exc: BaseException | None) -> OSError | None:
    """The "no space left on device" error behind ``exc`` (itself, or what it was raised from: MLflow and pandas wrap
    it in messages that do not say so), SQLite's "database or disk is full" as one naming the tracking store's file
    (SQLAlchemy's traceback names no file), else None."""
    import sqlite3

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return exc
        if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            from segbench.tracking import runs as tracking

            store = tracking.sqlite_path(tracking.tracking_uri())
            return OSError(errno.ENOSPC, "the MLflow tracking store cannot grow", str(store) if store else None)
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def full_disk_line(error: OSError) -> str:
    """A full disk in one line: the folder whose filesystem is full, the bytes free there and what to do (every write
    is atomic, so nothing half-written is left; an MLflow run being logged is marked FAILED).

    An error naming no file (a worker process's) names the temporaries' folder, read without
    ``tempfile.gettempdir()``: its first call writes a probe file, which fails when the disk is full."""
    import shutil

    named = error.filename2 or error.filename  # a copy's error names its source first, then the file it writes
    temporaries = _temporaries_folder()
    folder = Path(named).parent if named else temporaries
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    folder = folder.resolve()
    while folder != folder.parent and folder.parent.stat().st_dev == folder.stat().st_dev:  # up to the full filesystem's top
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    needed = f"{error.strerror}, " if error.strerror and error.strerror != os.strerror(errno.ENOSPC) else ""
    return (
        f"no space left on the device of {folder} ({needed}{free} bytes free there{f', writing {named}' if named else ''}); "
        f"free space there (temporaries go to TMPDIR={temporaries}: point it at a larger disk) and rerun; "
        "nothing half-written was kept"
    )


def _temporaries_folder() -> Path:
    """Where Python puts temporaries: the folder ``tempfile`` settled on if it has, else the first of TMPDIR, TEMP and
    TMP that is set, else /tmp (``tempfile``'s own order, without its writing probe)."""
    import tempfile

    return Path(tempfile.tempdir or next((os.environ[name] for name in ("TMPDIR", "TEMP", "TMP") if os.environ.get(name)), "/tmp"))
