#!/usr/bin/env bash
# Issue 43's checks on a lent GPU, as one prepared run of the device tool (its machine has torch,
# Lightning, torchmetrics, safetensors, filelock and pandas; docstring-parser travels as a wheel).
# Here, in the repository's root, once:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl docstring-parser
# then the device tool's run, with carry [".whl"] and timeout_s 590:
#   bash benchmarks/device_checks.sh
# The whole script keeps within BUDGET seconds (480 unless set): the tool lowers its own limit when a
# slow start has used the session's device time, and the slack keeps that from cutting the run. Each
# step has a limit of its own, cut to what is left of the budget, in the order of what the issue needs
# most, so that a cut takes the least needed:
#   1. a preflight: the versions, the C compiler and Python's headers that torch.compile needs;
#   2. the capture-safety check on the device (gpu_path.py) -> capture_check.json;
#   3. fit() plain against its fast path: the same weights, the own model, MNIST in img/s, parity
#      (fit_gpu.py) -> fit_gpu.json;
#   4. the compile cache: the step loaded from torch.compile's on-disk cache against the one compiled
#      afresh, cold and warm processes, kernel profiles (compile_cache.py) -> compile_cache.json;
#   5. the rest of the CUDA graph path: a resume, a second fit (gpu_path.py) -> gpu_path.json;
#   6. fit() with a compiled fast path, with what time is left (fit_gpu.py) -> fit_gpu_compiled.json.
# Every script saves its JSON as it measures, so a step cut short keeps what it measured. The numbers
# come back in $OUT, with the whole output in log.txt.
set -uo pipefail
out="${OUT:?run this on the device machine, where OUT names the folder that comes back}"
budget="${BUDGET:-480}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
if compgen -G ".whl/*.whl" >/dev/null; then
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/*.whl 2>/dev/null; then
    export PYTHONPATH="/tmp/site:$PWD"
  else # no pip: a pure-Python wheel imports in place, as a zip
    PYTHONPATH="$(printf '%s:' "$PWD"/.whl/*.whl)$PWD"
    export PYTHONPATH
  fi
fi

step() { # step NAME LIMIT COMMAND...: the command under LIMIT seconds, or what is left of the budget
  local name="$1" limit="$2" left=$((budget - SECONDS))
  shift 2
  if ((left < limit)); then limit=$left; fi
  if ((limit < 20)); then
    echo "== $name: skipped ($left s of the budget left)"
    return
  fi
  echo "== $name (limit $limit s, at $SECONDS s)"
  timeout "$limit" "$@"
  echo "status $? (at $SECONDS s)"
}

{
  echo "== preflight"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "no nvidia-smi"
  echo "C compiler (torch.compile's Triton builds with it): CC=${CC:-} $(command -v gcc cc | tr '\n' ' ')"
  timeout 60 python3 -c "
import importlib.util, os, platform, sysconfig
import torch, lightning, torchmetrics
triton = importlib.util.find_spec('triton')
print('python', platform.python_version(), '| torch', torch.__version__, '| lightning', lightning.__version__,
      '| torchmetrics', torchmetrics.__version__, '| triton', triton and __import__('triton').__version__)
print('Python.h:', os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')),
      '| docstring_parser:', importlib.util.find_spec('docstring_parser') is not None,
      '| cuda:', torch.cuda.is_available())
"
  step capture_check 75 python3 benchmarks/gpu_path.py --synthetic --only capture_check_cuda \
    --json "$out/capture_check.json"
  step fit_gpu 150 python3 benchmarks/fit_gpu.py --ways plain fast --json "$out/fit_gpu.json"
  step compile_cache 170 python3 benchmarks/compile_cache.py --synthetic --json "$out/compile_cache.json"
  step gpu_path 75 python3 benchmarks/gpu_path.py --synthetic --only resume second_fit --json "$out/gpu_path.json"
  step fit_gpu_compiled 150 python3 benchmarks/fit_gpu.py --ways fast_compiled --json "$out/fit_gpu_compiled.json"
} 2>&1 | tee "$out/log.txt"
