"""Stand-in interactive model for the harness tests: replays a planned prediction per step.

The step is read off the input the way a model could: 1 without clicks, else 1 + the number of
click rounds so far. ``--plan`` holds ``step_<k>`` label maps; a step without one writes no output.
With ``--wait-for FILE`` it first blocks until FILE exists (a model still working when the test says so; after
600 s, a bound on a hang, it fails), sleeping, or with ``--busy`` computing (spending CPU all the while); every call
appends its step, the input's keys and its OMP_WAIT_POLICY to ``--log``.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

parser = argparse.ArgumentParser()
for flag in ("--input", "--output", "--plan", "--log"):
    parser.add_argument(flag, required=True)
parser.add_argument("--wait-for", type=Path)
parser.add_argument("--busy", action="store_true")
args = parser.parse_args()
deadline = time.monotonic() + 600
while args.wait_for is not None and not args.wait_for.exists():
    if time.monotonic() > deadline:
        sys.exit(f"stand-in: {args.wait_for} never appeared")
    if not args.busy:
        time.sleep(0.05)
import numpy as np  # noqa: E402 (after the wait: a model waiting asleep spends next to no CPU)

with np.load(args.input, allow_pickle=True) as data:
    step_input = dict(data)
step = 1 + len(list(step_input["clicks_order"])[0]) if "clicks_order" in step_input else 1
with open(args.log, "a", encoding="utf-8") as fh:
    fh.write(json.dumps({"step": step, "keys": sorted(step_input), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}) + "\n")
with np.load(args.plan) as plan:
    if f"step_{step}" in plan:
        np.savez_compressed(args.output, segs=plan[f"step_{step}"])
