"""Model weights pins: ``models/<name>.dvc`` files in the format ``dvc import-url`` writes.

A pin names the official URL (``deps[0].path``) and, where the publisher gives one, the md5 of the
file (``outs[0].md5``). Before a real model runs, :func:`weights_status` says whether the weights
on disk are the pinned ones. Results from weights that are unpinned (no published md5) or not
verifiable are only produced when the user asks for it explicitly, and the prediction manifest
records that, so they can never be published as pinned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from segbench.base.io import file_digest
from segbench.base.schema import ConfigError
from segbench.models.schema import ModelConfig

#: statuses; only "verified" (or "none" for models without weights) may be published
PUBLISHABLE = ("verified", "none")


def weights_dir(model: ModelConfig, root: Path = Path(".")) -> Path:
    """Where the model's weights live: ``weights.dir`` of its config, else ``models/<name>``."""
    configured = (model.weights or {}).get("dir")
    return root / (configured or Path("models") / model.name)


def read_pin(model: ModelConfig, root: Path = Path(".")) -> dict[str, Any]:
    """The parsed ``.dvc`` pin file named by ``weights.pin``; an error names the model and file."""
    pin = (model.weights or {}).get("pin")
    if not pin:
        raise ConfigError(f"model {model.name!r}: weights.pin (the models/<name>.dvc file) is not configured")
    path = root / pin
    if not path.is_file():
        raise ConfigError(f"model {model.name!r}: weights pin {path} does not exist")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not data.get("deps") or not data.get("outs"):
        raise ConfigError(f"model {model.name!r}: {path} is not an import-url pin (needs deps[0].path = URL and outs)")
    return data


def weights_status(model: ModelConfig, root: Path = Path(".")) -> dict[str, Any]:
    """Pin status of the model's weights: ``status`` is none | verified | unpinned | missing | mismatch.

    ``verified`` means the file at the pinned output path exists and its md5 equals the pin's; for a model whose weights
    are inside its image, that the image is pinned (archive sha256 or reference digest; checked when it is loaded).
    """
    if model.image is not None and not model.weights:  # the weights are the image's: pinned by its sha256 or digest, checked when it loads
        reference = model.image.reference
        return {
            "status": "verified" if model.image.pinned else "unpinned",
            "url": reference,
            "md5": None,
            "file": None if model.image.archive is None else str(model.image.archive),
            "image_sha256": model.image.sha256,
        }
    if model.is_simulated or not model.weights:
        return {"status": "none", "url": None, "md5": None, "file": None}
    pin = read_pin(model, root)
    out = pin["outs"][0]
    pin_file = root / model.weights["pin"]
    target = pin_file.parent / out["path"]
    status = {"url": str(pin["deps"][0]["path"]), "md5": out.get("md5"), "file": str(target)}
    if not out.get("md5"):
        return {"status": "unpinned", **status}
    if not target.is_file():
        return {"status": "missing", **status}
    actual = file_digest(target, "md5")
    if actual != out["md5"]:
        return {"status": "mismatch", **status, "actual_md5": actual}
    return {"status": "verified", **status}
