"""Stand-in for the model environment's python, for the two adapters that run a Python entry point:
``python -m monai.bundle run ...`` (writes <out>/<stem>/<stem>_trans.nii.gz per image, as the bundle's
SaveImaged does) and ``python .../ctfm_segment.py ...`` (writes <out>/<case>.nii.gz per listed case)."""

import sys
from pathlib import Path

from _recording import log_call, value, write_recording

argv = sys.argv[1:]
if argv[:3] == ["-m", "monai.bundle", "run"]:
    log_call("monai.bundle")
    if not value(argv, "--config_file").endswith("configs/inference.json"):
        sys.exit(f"monai stand-in: bad call {argv}")
    for image in sorted(Path(value(argv, "--dataset_dir")).glob("*.nii.gz")):
        stem = image.name[: -len(".nii.gz")]
        write_recording(stem, Path(value(argv, "--output_dir")) / stem / f"{stem}_trans.nii.gz")
elif argv and argv[0].endswith("ctfm_segment.py"):
    log_call("ctfm_segment")
    if not Path(argv[0]).is_file():
        sys.exit(f"ctfm stand-in: entry point {argv[0]} does not exist")
    for case_id in Path(value(argv, "--cases")).read_text().split():
        write_recording(case_id, Path(value(argv, "--output")) / f"{case_id}.nii.gz")
else:
    sys.exit(f"python stand-in: unexpected call {argv}")
