"""Stand-in for MOOSE's CLI: for each subject folder with CT_<name>.nii.gz under -d, writes the
recorded output as <subject>/moosez-<timestamp>/segmentations/clin_CT_organs_segmentation_CT_<name>.nii.gz."""

import sys
from pathlib import Path

from _recording import log_call, value, write_recording

argv = sys.argv[1:]
log_call("moosez")
if value(argv, "-m") != "clin_ct_organs":
    sys.exit(f"moosez stand-in: unexpected model in {argv}")
for subject in sorted(p for p in Path(value(argv, "-d")).iterdir() if p.is_dir()):
    image = next(subject.glob("CT_*.nii.gz"))
    stem = image.name[: -len(".nii.gz")]
    write_recording(subject.name, subject / "moosez-2026-01-01-00-00-00" / "segmentations" / f"clin_CT_organs_segmentation_{stem}.nii.gz")
