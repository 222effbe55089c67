"""The HTML every page shares: a disclosure (details/summary) and the page name of a structure or model (``slug``)."""

from __future__ import annotations

import hashlib
import re


def disclosure(summary: str, body: str, open_: bool = False) -> str:
    """Details a reader opens on demand: ``summary`` is the line shown (HTML), ``body`` HTML."""
    return f"<details{' open' if open_ else ''}><summary>{summary}</summary>{body}</details>"


def slug(text: str) -> str:
    """File- and id-safe form of a name, one per name: a name that needs changing to be safe gets a short digest of
    itself appended, so that two names slugging alike (``liver!``, ``liver?``) get distinct pages instead of one
    replacing the other."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "x"
    return safe if safe == text else f"{safe}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:8]}"
