#!/usr/bin/env bash
# One-shot `gpudesk calibrate` on a real GPU server (docs/calibration.md):
#
#     bench/calibrate_gpu.sh OUT.json [SECONDS_PER_PROBE]   (default 8)
#
# Prints the GPUs (nvidia-smi -L) and the plan with its probe time, runs
#  `gpudesk calibrate --json --seconds S` on GPU 0 (GPUDESK_CALIBRATE_GPU to pick another) and writes
# the JSON to OUT.json; the human-readable tables are printed from it afterwards. With the
# default 8 s the whole plan on a GPU not in MIG mode is 14 runs, 112 s of probes, about 3 to 4
# minutes of wall time. Runs from a checkout without installing (PYTHONPATH), with PYTHON
# (default python3) holding a CUDA build of torch and nvidia-ml-py. Changes no GPU setting;
# the fit is not saved (--no-save) unless GPUDESK_CALIBRATE_SAVE=1.
set -euo pipefail
out=${1:?usage: bench/calibrate_gpu.sh OUT.json [SECONDS_PER_PROBE]}
seconds=${2:-8}
gpu=${GPUDESK_CALIBRATE_GPU:-0}
here=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export GPUDESK_HOME=${GPUDESK_HOME:-$(mktemp -d /tmp/gpudesk-calibrate-home.XXXXXX)}
unset GPUDESK_BACKEND
py=${PYTHON:-python3}
save=--no-save
[ "${GPUDESK_CALIBRATE_SAVE:-0}" = 1 ] && save=--save

echo "== nvidia-smi -L"
nvidia-smi -L
echo "== plan"
"$py" -m gpudesk calibrate --dry-run --gpu "$gpu" --seconds "$seconds"
echo "== calibrate (progress on stderr)"
start=$(date +%s)
"$py" -m gpudesk calibrate --json --gpu "$gpu" --seconds "$seconds" "$save" >"$out"
echo "== done in $(( $(date +%s) - start )) s; JSON in $out"
"$py" - "$out" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
print(f"{data['gpu_model']}: wall {data['wall_s']} s, probes {data['plan']['probe_seconds']} s")
for name, w in data["workloads"].items():
    print(f"  {name:7s} sm {w['sm']:.3f} membw {w['membw']:.3f} "
          f"kernel-active {w['kernel_active']} steps/s {w['steps_per_s']}")
for p in data["probes"]:
    print(f"  {p['run']:22s} {p['intensity']:7s} measured {p['measured']:.3f} "
          f"default {p['predicted_default']:.3f} fit {p['predicted_fit']:.3f}")
for p in data["params"]:
    print(f"  {p['name']:20s} default {p['default']:.4g} fitted {p['fitted']:.4g} "
          f"obs {p['observations']} ({p['how']})")
print(f"  RMS residual: defaults {data['rms_residual_default']} fit {data['rms_residual_fit']}")
for note in data["notes"]:
    print(f"  note: {note}")
PY
