#!/usr/bin/env bash
# GPU readiness check (see tools/gpu_check.py): decomposition on CUDA against a CPU float64
# reference, cuSOLVER SVD drivers timed and one picked, one vLLM weight swap; prints one table.
# Fails loudly (exit 2) when no GPU is visible. Run from the repository root after tools/install.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
[ -x "$py" ] || py=python3
exec "$py" tools/gpu_check.py "$@"
