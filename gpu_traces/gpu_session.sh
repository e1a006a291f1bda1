#!/usr/bin/env bash
# Record the full GPU suite on this machine's first GPU, then recalibrate: one command,
# at most 6 minutes of GPU time (the recorder's budget keeps to the limit); the full suite took
# 74-101 s on an H200.
#
#   gpu_traces/gpu_session.sh                 # what `./dev record --device cuda` runs
#   gpu_traces/gpu_session.sh --max-seconds 300 --out /tmp/traces
#
# It checks the GPU before any timing (a MIG slice, other processes on the GPU, a GPU the
# catalogue does not know are reported), then runs `python -m gpu_traces.record --device
# cuda`, `python -m gpu_traces.steps` and `python -m gpu_traces.calibrate`. The trace goes to
# gpu_traces/traces/<device>/<UTC time>-cuda.json (or --out), the whole steps to
# gpu_traces/steps/<device>/<UTC time>-steps.json; commit them with sim/calibrations/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${TRACE_PYTHON:-.venv-trace/bin/python}

say() { printf '\033[1m[gpu-session]\033[0m %s\n' "$*" >&2; }

if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,mig.mode.current,power.limit,clocks.max.sm \
        --format=csv >&2 || true
    busy=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null || true)
    if [ -n "$busy" ]; then
        say "warning: other processes are using the GPU; their work would be timed with ours:"
        printf '%s\n' "$busy" >&2
    fi
else
    say "nvidia-smi not found: clocks, power and throttling are recorded only if pynvml imports"
fi

"$PY" - <<'PY'
import sys
import torch
from sim.hardware import identify_device
if not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU: install a CUDA "
             f"build of torch into .venv-trace (gpu_traces/README.md)")
ident = identify_device(torch.cuda.get_device_name(0))
print(f"[gpu-session] recording on {ident.name} -> "
      f"{ident.key or 'no catalogue GPU (' + ident.reason + ')'}", file=sys.stderr)
PY

"$PY" -m gpu_traces.record --device cuda "$@"
"$PY" -m gpu_traces.steps --device cuda          # whole forward steps (35 s on an H200)
"$PY" -m gpu_traces.calibrate
say "done: commit the new files under gpu_traces/traces/, gpu_traces/steps/ and sim/calibrations/"
