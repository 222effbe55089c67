"""Helpers shared by tests (not fixtures)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def in_directory(path: Path) -> Iterator[None]:
    """Run the block with ``path`` as the working directory (stages use project-relative paths)."""
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)
