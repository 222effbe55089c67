# The CVPR 2025 challenge's entry point of the region-growing image (run as `sh predict.sh` in /workspace):
# every step file in /workspace/inputs becomes the same-named npz with `segs` in /workspace/outputs.
set -e
for input in /workspace/inputs/*.npz; do
    python3 /workspace/region_growing_interactive.py --input "$input" --output "/workspace/outputs/$(basename "$input")"
done
