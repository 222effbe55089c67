"""CT-FM whole-body segmentation of a folder of CT images; runs INSIDE the CT-FM environment.

CT-FM ships no command-line tool, only ``lighter_zoo.SegResNet`` weights on Hugging Face
(``project-lighter/whole_body_segmentation``, 118 output channels: background + the 117
TotalSegmentator v2 classes). This script is segbench's command for it; it is run by the model's
own Python (``envs/ctfm``), never imported by segbench. Pre- and post-processing follow the model
card: orientation SPL, intensity -1024..2048 HU -> 0..1, foreground crop, Gaussian sliding window
96x160x160 with overlap 0.625, softmax argmax, inverted back onto the input grid.

    python ctfm_segment.py --input in/ --output out/ --cases cases.txt --weights models/ctfm_wholebody --device cuda
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, required=True, help="folder of <case>.nii.gz CT images")
    parser.add_argument("--output", type=Path, required=True, help="folder for <case>.nii.gz label maps")
    parser.add_argument("--cases", type=Path, required=True, help="text file, one case id per line")
    parser.add_argument("--weights", required=True, help="local snapshot of project-lighter/whole_body_segmentation")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)

    import torch
    from lighter_zoo import SegResNet
    from monai.inferers import SlidingWindowInferer
    from monai.transforms import (
        Activations,
        AsDiscrete,
        Compose,
        CropForeground,
        EnsureType,
        Invert,
        LoadImage,
        Orientation,
        SaveImage,
        ScaleIntensityRange,
    )

    device = torch.device(args.device)
    model = SegResNet.from_pretrained(args.weights).to(device).eval()
    preprocess = Compose(
        [
            LoadImage(ensure_channel_first=True),
            EnsureType(),
            Orientation(axcodes="SPL"),
            ScaleIntensityRange(a_min=-1024, a_max=2048, b_min=0, b_max=1, clip=True),
            CropForeground(allow_smaller=True),
        ]
    )
    inferer = SlidingWindowInferer(roi_size=[96, 160, 160], sw_batch_size=2, overlap=0.625, mode="gaussian", device=torch.device("cpu"))
    to_labels = Compose([Activations(softmax=True), AsDiscrete(argmax=True, dtype=torch.uint8)])
    cases = [c.strip() for c in args.cases.read_text(encoding="utf-8").splitlines() if c.strip()]
    for done, case_id in enumerate(cases, start=1):
        image = preprocess(str(args.input / f"{case_id}.nii.gz"))
        with torch.no_grad():
            logits = inferer(image.unsqueeze(0).to(device), model, sw_device=device)[0]
        labels = Invert(transform=preprocess)(to_labels(logits))
        SaveImage(output_dir=str(args.output), output_postfix="", separate_folder=False, output_dtype="uint8", resample=False)(labels)
        print(f"[ctfm] {case_id} ({done}/{len(cases)})", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
