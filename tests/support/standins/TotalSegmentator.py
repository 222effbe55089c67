"""Stand-in for TotalSegmentator's CLI: same arguments, writes the real recorded output (-o, --ml)."""

import sys
from pathlib import Path

from _recording import log_call, value, write_recording

argv = sys.argv[1:]
log_call("TotalSegmentator")
image = Path(value(argv, "-i"))
device = value(argv, "-d")
if not image.is_file() or "--ml" not in argv or device.split(":")[0] not in ("gpu", "cpu"):
    sys.exit(f"TotalSegmentator stand-in: bad call {argv}")
write_recording(image.name[: -len(".nii.gz")], Path(value(argv, "-o")))
