#!/usr/bin/env bash
# The checks a lent GPU runs in one call, each under its own time limit, results into $OUT:
#   bash bench/lent_gpu.sh OUT_DIR [pairs,dataplane,dataplane_mps,metrics,staging,scaling,learner_day]
# Run from the checkout, with the wheels the GPU image lacks in .whl/ (docs/hardware-validation.md
# says which). Read-only: nothing here changes MIG mode, clocks, power limits, the compute mode or
# persistence, or resets the GPU; the MPS daemons are the scripts' own, in temporary folders.
set -u
out=${1:?usage: bench/lent_gpu.sh OUT_DIR [checks]}
checks=${2:-pairs,dataplane,dataplane_mps,metrics}
mkdir -p "$out"
log="$out/log.txt"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl >>"$log" 2>&1 || echo "wheels: install failed" >>"$log"
    export PYTHONPATH=$PWD:/tmp/site
else
    export PYTHONPATH=$PWD
fi
stamp() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$log"; }
stamp "kernel $(uname -r); start: $(nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current,compute_mode,persistence_mode,clocks.sm --format=csv,noheader 2>&1)"
python3 -c 'import torch, torchvision; print("torch", torch.__version__, "cuda", torch.version.cuda, "torchvision", torchvision.__version__)' >>"$log" 2>&1
has() { case ",$checks," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
if has pairs; then
    stamp "pairs"
    timeout -k 5 240 python3 bench/gpu_pairs.py --out /tmp/pairs --window 2.5 --budget-s 225 >>"$log" 2>&1
    stamp "pairs rc=$?"
    cp /tmp/pairs/gpu_pairs.json "$out/" 2>/dev/null
    cat /tmp/pairs/workers-*.log >"$out/pairs_workers.log" 2>/dev/null
fi
if has dataplane; then
    stamp "dataplane"
    timeout -k 5 120 python3 bench/gpu_dataplane.py --out /tmp/dp --device cuda >>"$log" 2>&1
    stamp "dataplane rc=$?"
    cp /tmp/dp/gpu_dataplane.json "$out/gpu_dataplane.json" 2>/dev/null
fi
if has dataplane_mps; then
    stamp "dataplane under MPS"
    timeout -k 5 90 python3 bench/gpu_dataplane.py --out /tmp/dpm --device cuda --only ipc --start-mps >>"$log" 2>&1
    stamp "dataplane under MPS rc=$?"
    cp /tmp/dpm/gpu_dataplane.json "$out/gpu_dataplane_mps.json" 2>/dev/null
fi
if has staging; then
    # The loader's own staged path (issue 40): 4 consumers of one GPU, host copies vs one staged
    # copy, interleaved twice, 4.8 MB batches (alone and under MPS) and 0.88 MB; then decode
    # per core vs nvJPEG.
    for run in 224:--decode 224:--mps 96:; do
        px=${run%%:*}; opt=${run#*:}; name=loader_staging_$px${opt:+_${opt#--}}
        stamp "$name"
        timeout -k 5 150 python3 bench/loader_staging.py --out /tmp/$name --device cuda --px $px \
            --consumers 4 --seconds 6 --configs host,staged,host,staged $opt >>"$log" 2>&1
        stamp "$name rc=$?"
        cp /tmp/$name/loader_staging.json "$out/$name.json" 2>/dev/null
    done
    if python3 -c 'import pytest, xdist' 2>/dev/null && [ -z "${SKIP_TESTS:-}" ]; then
        stamp "staging tests"
        timeout -k 5 90 python3 -m pytest -p no:cacheprovider -n 0 -q tests/loader/test_loader_staging.py >>"$log" 2>&1
        stamp "staging tests rc=$?"
    fi
fi
if has metrics; then
    stamp "metrics"
    timeout -k 5 100 python3 bench/hardware_truth.py --out /tmp/ht --only metrics --budget-s 95 >>"$log" 2>&1
    stamp "metrics rc=$?"
    cp /tmp/ht/hardware_truth.json "$out/hardware_truth.json" 2>/dev/null
    cat /tmp/ht/log.txt >>"$log" 2>/dev/null
fi
if has scaling; then
    # Issue 39's n-tenant question: k copies of one job (k = 2..8), then two mixes, under MPS
    # (first: the mechanism the model's per-tenant cost is about) and time-sliced.
    groups="mlp-narrow*2;mlp-narrow*4;mlp-narrow*8;resnet18*2;resnet18*4;resnet18*8"
    groups="$groups;transformer*2;transformer*4;mlp-wide*2;mlp-wide*3;mlp-wide*4"
    groups="$groups;mlp-narrow*2+resnet18*2+transformer*2+mlp-wide*2;mlp-narrow*4+resnet18*4"
    stamp "scaling"
    timeout -k 5 290 python3 bench/gpu_pairs.py --out "$out/scaling" --window 3 --budget-s 280 \
        --mechanisms mps,naive --jobs mlp-narrow,resnet18,transformer,mlp-wide \
        --groups "$groups" >>"$log" 2>&1
    stamp "scaling rc=$?"
fi
if has learner_day; then
    # Session 37's one-home day again (exclusive first, so every job's steady share alone is
    # known), with the learner that reads steady shares: does `auto` after learning keep pace?
    stamp "learner_day"
    timeout -k 5 400 python3 bench/gpu_day.py --out "$out/learner_day" --only day --day probes \
        --job-s 15 --budget-s 390 --policies exclusive,auto,auto --shared-home \
        --observe-min-s 6 >>"$log" 2>&1
    stamp "learner_day rc=$?"
fi
stamp "end: $(nvidia-smi --query-gpu=mig.mode.current,compute_mode,persistence_mode,memory.used --format=csv,noheader 2>&1)"
