"""Write the two SYNTHETIC traces of issue 39 into traces/ (seeded: the same files each run).

    python bench/issue39_traces.py traces/

- `sweep-day-a100x4.json`: a same-command sweep day on a DGX Station A100 (4 x A100 40GB). One
  program (ResNet-50 on ImageNet, one epoch) swept over batch size {32, 64, 128} x learning rate
  {0.1, 0.03, 0.01, 0.003}: 12 members a burst, submitted 3 s apart by a sweep launcher, in four
  bursts two hours apart (48 jobs).
- `h100-mixed-day.json`: one H100 80GB; four heavy jobs (BERT-base 4 epochs, Mask R-CNN 1, VGG16
  and Xception at batch 128, 2 each) an hour apart, and 40 light CIFAR-100 jobs (ResNet-18/34,
  EfficientNet-B0, MobileNetV3 at batch 32-128, 20-50 epochs) arriving every 6 minutes on average.

Every per-job figure is taken from a MEASURED row of the CARMA Philly trace
(`traces/carma-philly-t1.json`, itself from itu-rad/CARMA): peak memory, the three estimators'
guesses, the class, and the minutes per epoch measured alone on a DGX Station A100 (run time =
minutes per epoch x epochs, as that trace computes it). What is ours, and assumed: the mix, the
epochs, the arrival times, the sweep's learning rates (they change neither memory nor time, as
nothing measured says they do), and, on the H100, the A100's measured minutes used unchanged (an
H100 is faster; no per-job H100 time is published). The SM share comes from the class, as for the
Philly trace (light 10 %, medium 30 %, heavy 70 %: assumptions, docs/simulator.md).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

PHILLY = Path(__file__).resolve().parents[1] / "traces" / "carma-philly-t1.json"
MEASURED = (
    "peak_memory_mb",
    "estimate_gpumemnet_mb",
    "estimate_horus_mb",
    "estimate_faketensor_mb",
)

SWEEP_BATCHES = (32, 64, 128)
SWEEP_LRS = (0.1, 0.03, 0.01, 0.003)
SWEEP_BURSTS_S = (0, 7200, 14400, 21600)
SWEEP_GAP_S = 3
HEAVY = (  # (model, dataset, batch, epochs, arrival_s)
    ("BERT_base", "wiki", 32, 4, 0),
    ("MaskRCNN", "coco", 128, 1, 3600),
    ("vgg16", "imagenet", 128, 2, 7200),
    ("Xception", "imagenet", 128, 2, 10800),
)
LIGHT_MODELS = ("resnet18", "resnet34", "efficientnet_b0", "S_mobilenetv3")
LIGHT_JOBS = 40
LIGHT_MEAN_GAP_S = 360.0


def measured_rows() -> dict[tuple[str, str, int], dict[str, Any]]:
    """The Philly trace's measured figures by (model, dataset, batch size)."""
    rows: dict[tuple[str, str, int], dict[str, Any]] = {}
    for job in json.loads(PHILLY.read_text())["jobs"]:
        key = (job["model"], job["dataset"], int(job["batch_size"]))
        rows.setdefault(key, job)
    return rows


def _job(
    row: dict[str, Any], job_id: int, arrival: float, epochs: int, task: str, **more: Any
) -> dict[str, Any]:
    per_epoch = row["exclusive_minutes"] / row["epochs"]
    return {
        "id": job_id,
        "arrival_s": round(arrival),
        "task": task,
        "model": row["model"],
        "dataset": row["dataset"],
        "class": row["class"],
        "batch_size": row["batch_size"],
        "gpus": 1,
        "epochs": epochs,
        "exclusive_minutes": round(per_epoch * epochs, 2),
        **{k: row[k] for k in MEASURED if row.get(k) is not None},
        **more,
    }


def sweep_day(rows: dict[tuple[str, str, int], dict[str, Any]]) -> dict[str, Any]:
    jobs = []
    for burst, start in enumerate(SWEEP_BURSTS_S):
        members = [(b, lr) for b in SWEEP_BATCHES for lr in SWEEP_LRS]
        for i, (batch, lr) in enumerate(members):
            row = rows[("resnet50", "imagenet", batch)]
            command = (
                f"python train.py --model resnet50 --dataset imagenet --epochs 1 "
                f"--batch-size {batch} --lr {lr}"
            )
            jobs.append(
                _job(
                    row,
                    len(jobs) + 1,
                    start + i * SWEEP_GAP_S,
                    1,
                    f"sweep{burst + 1}-b{batch}-lr{lr}",
                    sweep="resnet50-imagenet",
                    command=command,
                )
            )
    return {
        "name": "sweep-day-a100x4",
        "station": "dgx-station-a100",
        "source": "SYNTHETIC (bench/issue39_traces.py): " + SWEEP_SOURCE,
        "jobs": jobs,
    }


def h100_day(rows: dict[tuple[str, str, int], dict[str, Any]]) -> dict[str, Any]:
    rng = random.Random(39)
    jobs = []
    for model, dataset, batch, epochs, arrival in HEAVY:
        row = rows[(model, dataset, batch)]
        jobs.append(_job(row, len(jobs) + 1, arrival, epochs, f"{model}-b{batch}-{epochs}e"))
    light_rows = [r for k, r in sorted(rows.items()) if k[0] in LIGHT_MODELS and k[1] == "cifar100"]
    t = 0.0
    for _ in range(LIGHT_JOBS):
        t += rng.expovariate(1 / LIGHT_MEAN_GAP_S)
        row = rng.choice(light_rows)
        epochs = rng.randint(20, 50)
        task = f"{row['model']}-cifar100-b{row['batch_size']}-{epochs}e"
        jobs.append(_job(row, len(jobs) + 1, t, epochs, task))
    jobs.sort(key=lambda j: (j["arrival_s"], j["id"]))
    return {
        "name": "h100-mixed-day",
        "station": "h100",
        "source": "SYNTHETIC (bench/issue39_traces.py, seed 39): " + H100_SOURCE,
        "jobs": jobs,
    }


SWEEP_SOURCE = (
    "one program (ResNet-50, ImageNet, 1 epoch) swept over batch 32/64/128 x lr "
    "0.1/0.03/0.01/0.003, 12 members a burst 3 s apart, four bursts 2 h apart; peak memory, "
    "estimator guesses and minutes per epoch from the measured rows of carma-philly-t1 (DGX "
    "Station A100); the lr changes neither"
)
H100_SOURCE = (
    "one H100: 4 heavy jobs (BERT-base 4 epochs, Mask R-CNN 1, VGG16 b128 2, Xception b128 2) an "
    "hour apart and 40 light CIFAR-100 jobs (ResNet-18/34, EfficientNet-B0, MobileNetV3, 20-50 "
    "epochs) every 6 min on average; per-job peak memory, estimator guesses and minutes per "
    "epoch from carma-philly-t1's measured rows, the A100's minutes used unchanged on the H100"
)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Write issue 39's two SYNTHETIC traces (seeded) into FOLDER."
    )
    parser.add_argument("folder", type=Path, help="where to write them, e.g. traces/")
    folder = parser.parse_args(argv[1:]).folder
    rows = measured_rows()
    try:
        for trace in (sweep_day(rows), h100_day(rows)):
            (folder / f"{trace['name']}.json").write_text(json.dumps(trace, indent=1) + "\n")
    except OSError as exc:
        sys.exit(f"cannot write into {folder}: {exc.strerror}")
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(lambda: main(sys.argv))
