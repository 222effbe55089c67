"""Install STU-Net's network and trainer files into the nnU-Net v1 package; runs INSIDE the STU-Net env.

STU-Net's README: copy ``network_training/*`` to ``nnunet/training/network_training/`` and
``network_architecture/*`` to ``nnunet/network_architecture/`` of the installed nnunet 1.7.1.

    python stunet_install.py <STU-Net checkout>
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: stunet_install.py <STU-Net checkout>", file=sys.stderr)
        return 2
    checkout = Path(args[0])
    import nnunet

    package = Path(nnunet.__file__).resolve().parent
    for source, target in (("network_training", "training/network_training"), ("network_architecture", "network_architecture")):
        files = sorted(p for p in (checkout / source).iterdir() if p.is_file()) if (checkout / source).is_dir() else []
        if not files:
            print(f"{checkout / source}: no STU-Net files to install", file=sys.stderr)
            return 1
        for file in files:
            shutil.copy2(file, package / target / file.name)
            print(f"installed {file.name} -> {package / target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
