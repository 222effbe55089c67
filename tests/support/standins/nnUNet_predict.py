"""Stand-in for nnU-Net v1's nnUNet_predict (STU-Net): reads <case>_0000.nii.gz from -i, writes <case>.nii.gz to -o."""

import os
import sys
from pathlib import Path

from _recording import log_call, value, write_recording

argv = sys.argv[1:]
log_call("nnUNet_predict")
if not os.environ.get("RESULTS_FOLDER") or value(argv, "-t") != "101" or value(argv, "-tr") != "STUNetTrainer_base":
    sys.exit(f"nnUNet_predict stand-in: bad call {argv} (RESULTS_FOLDER={os.environ.get('RESULTS_FOLDER')})")
for image in sorted(Path(value(argv, "-i")).glob("*_0000.nii.gz")):
    case_id = image.name[: -len("_0000.nii.gz")]
    write_recording(case_id, Path(value(argv, "-o")) / f"{case_id}.nii.gz")
