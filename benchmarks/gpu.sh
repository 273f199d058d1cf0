#!/usr/bin/env bash
# GPU figures (not yet measured: no GPU was available when this was written): TRAIN at GPT-2-small size with
# bf16 autocast, flash SDPA, fused AdamW and torch.compile, and DECODE, against ceilings measured on the card.
#   benchmarks/gpu.sh              # on a CUDA machine; writes benchmarks/results/gpu.json
#   benchmarks/gpu.sh --dry-run    # tiny shapes on the CPU: checks the script, its figures mean nothing
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
if [[ " $* " != *" --dry-run "* ]]; then
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
fi
PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" "$PY" benchmarks/bench_gpu.py "$@"
