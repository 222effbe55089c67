"""Create a model's own environment (venv, conda env or container image) from the pins in its config.

segbench never imports a model's code (docs/methodology.md#2-model-kinds); each model runs in an environment built from
exact pins, separate from segbench's. ``segbench env create <model>`` runs the commands built here;
``--dry-run`` prints them. Creating one needs network access to the package indexes (and usually a
CUDA machine for the GPU wheels): it is expected to fail on an offline machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from segbench.base.schema import ConfigError
from segbench.models.schema import ModelConfig


def _formatted(argv: list[str], values: dict[str, str]) -> list[str]:
    return [str(part).format(**values) for part in argv]


def create_commands(model: ModelConfig, root: Path = Path(".")) -> list[list[str]]:
    """The command lines that build the model's environment, in order.

    venv: ``python -m venv`` with the configured interpreter, then ``pip install`` of the exact pins
    (with ``pip_args`` such as the CUDA wheel index); conda: ``conda create`` then pip inside it;
    container: the runtime's ``pull`` of the image's reference (an archive needs nothing). ``post_install`` commands (e.g. fetching the
    bundle configuration) run last, with ``{python}`` = the environment's interpreter and
    ``{weights_dir}`` and ``{adapters_dir}`` (segbench's model entry points) filled.
    """
    env = model.environment
    kind = env["type"]
    if kind == "harness":
        return []
    packages = [str(p) for p in env.get("packages", ())]
    pip_args = [str(a) for a in env.get("pip_args", ())]
    weights = (model.weights or {}).get("dir") or f"models/{model.name}"
    if kind == "venv":
        path = root / env["path"]
        python = str(path / "bin" / "python")
        commands = [[str(env.get("python", "python3")), "-m", "venv", str(path)], [python, "-m", "pip", "install", "--upgrade", "pip"]]
        if packages:
            commands.append([python, "-m", "pip", "install", *pip_args, *packages])
    elif kind == "conda":
        name = str(env["name"])
        channels = [arg for ch in env.get("channels", ()) for arg in ("-c", str(ch))]
        version = str(env.get("python", "3.11")).removeprefix("python")  # "python3.11" (venv interpreter) or "3.11"
        commands = [["conda", "create", "-y", "-n", name, *channels, f"python={version}"]]
        python = "python"
        if packages:
            commands.append(["conda", "run", "-n", name, "python", "-m", "pip", "install", *pip_args, *packages])
    elif kind == "container":
        assert model.image is not None  # the config requires it
        if model.image.reference is None:
            return []  # an archive: checked against its sha256 and loaded when the model runs
        from segbench.models.container import Runtime

        return [Runtime.from_environment().argv("pull", model.image.reference)]
    else:
        raise ConfigError(f"model {model.name!r}: unknown environment type {kind!r}")
    from segbench.models.runner import ADAPTERS_DIR

    values = {"python": python, "weights_dir": str(root / weights), "adapters_dir": str(ADAPTERS_DIR)}
    for step in env.get("post_install", ()):
        argv = _formatted(list(step), values)
        commands.append(argv if kind == "venv" else ["conda", "run", "-n", str(env["name"]), *argv])
    return commands


def create(model: ModelConfig, root: Path = Path("."), *, dry_run: bool = False) -> None:
    """Run (or print, with ``dry_run``) the commands that build the model's environment."""
    for argv in create_commands(model, root):
        print(" ".join(argv), file=sys.stderr, flush=True)
        if not dry_run:
            result = subprocess.run(argv, check=False)
            if result.returncode != 0:
                raise RuntimeError(f"model {model.name!r}: environment step failed with status {result.returncode}: {' '.join(argv)}")
