"""Real-GPU check of the NVML backend: what a driver reports under a small torch training load.

    python bench/nvml_validation.py [--seconds 20] [--interval 0.5] [--json]

Starts a torch training loop on `cuda:0` in a subprocess (a 4-layer MLP on random data, sized to
keep the GPU busy without filling it), reads the station through `NvmlBackend` every `--interval`
while it runs, and reports:

- which metrics the GPU answered and which it marked unavailable (probed once);
- SM activity (GPM) next to kernel-active time, memory, power, temperature, clocks;
- the energy counter's delta over the window next to power integrated over the same readings;
- the training process as NVML lists it (memory, SM share);
- `gpudesk top --once --json` with GPUDESK_BACKEND=nvml, taken during the load.

Needs an NVIDIA driver and a CUDA build of torch; it changes no GPU setting. The result goes into
docs/hardware-validation.md by hand. With `--load-device cpu` and the fake pynvml on PYTHONPATH
(tests/fakes/nvml_shim, GPUDESK_FAKE_NVML) it runs anywhere, which is how the script is checked.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from gpudesk.hw.telemetry.nvml import NvmlBackend

LOAD = r"""
import sys, time, torch
device = sys.argv[1]
seconds = float(sys.argv[2])
torch.manual_seed(0)
model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(4096, 4096),
                                                            torch.nn.ReLU())]).to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(2048, 4096, device=device)
steps, end = 0, time.monotonic() + seconds
while time.monotonic() < end:
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    steps += 1
    if device.startswith("cuda") and steps % 10 == 0:
        torch.cuda.synchronize()
print(f"steps {steps}", flush=True)
"""


BUSY_PCT = 50.0  # kernel-active share from which the GPU counts as under the load


def summary(values: list[float | None]) -> dict[str, float] | None:
    known = [v for v in values if v is not None]
    if not known:
        return None
    return {
        "min": round(min(known), 1),
        "median": round(statistics.median(known), 1),
        "max": round(max(known), 1),
        "n": len(known),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--load-device", default="cuda:0")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    backend = NvmlBackend()
    backend.open()
    idle = backend.read()
    load = subprocess.Popen(
        [sys.executable, "-c", LOAD, args.load_device, str(args.seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = time.monotonic()
    top_after_s: float | None = None
    top_busy = False
    readings = []
    top_snapshot: dict[str, Any] | None = None
    time.sleep(min(3.0, args.seconds / 4))  # CUDA context and allocation
    while load.poll() is None:
        readings.append(backend.read())
        # Once the load is at work: two readings in a row with kernels running most of the time
        # (its start-up, python, torch and the CUDA context, took 8-11 s on an H200 and left
        # the GPU idle), or half-way through as a last resort on a GPU that never gets busy.
        busy = len(readings) >= 2 and all(
            (g.kernel_active_pct or 0.0) >= BUSY_PCT for r in readings[-2:] for g in r.gpus[:1]
        )
        waited = time.monotonic() - started >= args.seconds / 2 + 15
        if top_snapshot is None and (busy or waited):
            top_after_s = round(time.monotonic() - started, 1)
            top_busy = busy
            env = {**os.environ, "GPUDESK_BACKEND": "nvml"}
            done = subprocess.run(
                [sys.executable, "-m", "gpudesk", "top", "--once", "--json"],
                capture_output=True,
                text=True,
                env=env,
                timeout=30,
            )
            top_snapshot = (
                json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr.strip()}
            )
        time.sleep(args.interval)
    out, err = load.communicate()
    backend.close()
    if load.returncode != 0:
        raise SystemExit(f"the training load failed (exit {load.returncode}): {err.strip()}")

    gpus = []
    for index, first in enumerate(idle.gpus):
        series = [r.gpus[index] for r in readings if index < len(r.gpus)]
        live = [g for g in series if not g.lost]
        counter = [g.energy_counter_j for g in live]
        integrated = 0.0
        for a, b, ra, rb in zip(live, live[1:], readings, readings[1:], strict=False):
            if a.power_w is not None and b.power_w is not None:
                integrated += (a.power_w + b.power_w) / 2 * (rb.monotonic - ra.monotonic)
        first_j, last_j = (counter[0], counter[-1]) if len(counter) > 1 else (None, None)
        counter_delta = last_j - first_j if first_j is not None and last_j is not None else None
        per_pid: dict[int, list[Any]] = {}
        for g in live:
            for p in g.processes:
                per_pid.setdefault(p.pid, []).append(p)
        gpus.append(
            {
                "index": index,
                "name": first.name,
                "uuid": first.uuid,
                "unavailable": sorted({m for g in series for m in g.unavailable}),
                "lost": any(g.lost for g in series),
                "idle": {
                    "power_w": first.power_w,
                    "memory_used_mib": first.memory_used_mib,
                    "kernel_active_pct": first.kernel_active_pct,
                },
                "sm_activity_pct": summary([g.sm_activity_pct for g in live]),
                "kernel_active_pct": summary([g.kernel_active_pct for g in live]),
                "memory_used_mib": summary([g.memory_used_mib for g in live]),
                "power_w": summary([g.power_w for g in live]),
                "temperature_c": summary([g.temperature_c for g in live]),
                "sm_clock_mhz": summary([g.sm_clock_mhz for g in live]),
                "energy_counter_delta_j": None
                if counter_delta is None
                else round(counter_delta, 1),
                "integrated_power_j": round(integrated, 1),
                "counter_vs_integrated": None
                if not counter_delta or not integrated
                else round(counter_delta / integrated, 4),
                "window_s": round(readings[-1].monotonic - readings[0].monotonic, 2)
                if len(readings) > 1
                else 0.0,
                # every reading's per-process figures, summarised: NVML's process samples
                # beside the GPU's SM activity above
                "processes": [
                    {
                        "pid": pid,
                        "used_memory_mib": summary([p.used_memory_mib for p in seen]),
                        "sm_pct": summary([p.sm_pct for p in seen]),
                    }
                    for pid, seen in per_pid.items()
                ],
                "mig_enabled": first.mig_enabled,
            }
        )
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "load": out.strip(),
        "readings": len(readings),
        "interval_s": args.interval,
        "gpus": gpus,
        "banner": next((r.banner for r in readings if r.banner), None),
        "gpudesk_top": top_snapshot,
        "gpudesk_top_after_s": top_after_s,  # since the load started; taken at work if "busy"
        "gpudesk_top_busy": top_busy,
    }
    print(json.dumps(result, indent=2 if not args.json else None))


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
