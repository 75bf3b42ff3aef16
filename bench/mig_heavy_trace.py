"""Writes traces/mig-heavy-t1.json: a MIG-heavy day, many light jobs (seeded)."""
import json, random, sys
rng = random.Random(15)
jobs = []
t = 0.0
for i in range(1, 61):
    t += rng.expovariate(1 / 45.0)  # a job every 45 s on average
    light = rng.random() < 0.8
    peak = rng.uniform(1.0, 4.0) if light else rng.uniform(6.0, 14.0)
    jobs.append({
        "id": i, "arrival_s": round(t), "task": f"{'light' if light else 'medium'}-{i}",
        "class": "light" if light else "medium", "gpus": 1,
        "exclusive_minutes": round(rng.uniform(10, 40) if light else rng.uniform(20, 60), 2),
        "peak_memory_mb": round(peak * 1024), "estimate_gpumemnet_mb": round(peak * 1024 * 1.2),
        "sm_pct": 10.0 if light else 30.0,
    })
json.dump({"name": "mig-heavy-t1", "station": "a100-40gbx2",
           "source": "SYNTHETIC (bench/mig_heavy_trace.py, seed 15): 60 jobs, 80 % light (10 % SM, 1-4 GB, 10-40 min), 20 % medium (30 % SM, 6-14 GB, 20-60 min), arrivals every 45 s on average; GPUMemNet-like guesses 1.2x the peak",
           "jobs": jobs}, open(sys.argv[1], "w"), indent=1)
