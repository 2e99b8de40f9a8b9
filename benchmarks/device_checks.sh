#!/usr/bin/env bash
# Issue 43's checks on a lent GPU, as one prepared run of the device tool (its machine has torch,
# Lightning, torchmetrics, safetensors, filelock and pandas; docstring-parser travels as a wheel).
# Here, in the repository's root, once:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl docstring-parser
# then the device tool's run, with carry [".whl"] and timeout_s 590:
#   bash benchmarks/device_checks.sh
# Each check has a time limit of its own, in the order of what the issue needs most: fit() plain
# against its fast path (the own model, MNIST in img/s, parity, the same weights), the compile cache
# (the step loaded from torch.compile's on-disk cache against the one compiled afresh), and the CUDA
# graph path (the capture check on the device, a resume, a second fit). The numbers come back in
# $OUT: fit_gpu.json, compile_cache.json, gpu_path.json, and the whole output in log.txt.
set -uo pipefail
out="${OUT:?run this on the device machine, where OUT names the folder that comes back}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site:$PWD"
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, lightning; print('torch', torch.__version__, '| lightning', lightning.__version__)"
  echo "== fit_gpu (limit 240 s)"
  timeout 240 python3 benchmarks/fit_gpu.py --json "$out/fit_gpu.json"; echo "status $?"
  echo "== compile_cache (limit 150 s)"
  timeout 150 python3 benchmarks/compile_cache.py --synthetic --json "$out/compile_cache.json"; echo "status $?"
  echo "== gpu_path (limit 170 s)"
  timeout 170 python3 benchmarks/gpu_path.py --synthetic --json "$out/gpu_path.json"; echo "status $?"
} 2>&1 | tee "$out/log.txt"
