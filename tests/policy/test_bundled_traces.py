"""The bundled traces: each found by its bare name as `gpudesk simulate NAME` finds it, labelled
as what it is, and the two of issue 39 exactly what bench/issue39_traces.py writes from the
Philly trace's measured rows."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from gpudesk.examples import bundled, names
from gpudesk.policy.simulator import load_trace

ROOT = Path(__file__).resolve().parents[2]


def test_every_bundled_trace_is_found_by_name_and_says_where_it_comes_from() -> None:
    assert {"sweep-day-a100x4.json", "h100-mixed-day.json"} <= set(names("traces"))
    for name in names("traces"):
        path = bundled(name.removesuffix(".json"), "traces")
        assert path is not None and load_trace(path).jobs
        source = json.loads(path.read_text())["source"]
        assert "SYNTHETIC" in source or "CARMA" in source


def test_the_issue_39_traces_are_what_the_script_writes(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "issue39_traces", ROOT / "bench" / "issue39_traces.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["issue39_traces.py", str(tmp_path)]) == 0
    for name in ("sweep-day-a100x4.json", "h100-mixed-day.json"):
        assert (tmp_path / name).read_text() == (ROOT / "traces" / name).read_text()
    sweep = load_trace(ROOT / "traces" / "sweep-day-a100x4.json")
    philly = {
        (j["model"], j["batch_size"]): j
        for j in json.loads((ROOT / "traces" / "carma-philly-t1.json").read_text())["jobs"]
        if j["model"] == "resnet50"
    }
    # every member's memory is the measured ResNet-50 row of its batch size
    raw = json.loads((ROOT / "traces" / "sweep-day-a100x4.json").read_text())["jobs"]
    for job in raw:
        assert job["peak_memory_mb"] == philly[("resnet50", job["batch_size"])]["peak_memory_mb"]
    assert len(sweep.jobs) == 48 and {j.model for j in sweep.jobs} == {"resnet50"}
    h100 = load_trace(ROOT / "traces" / "h100-mixed-day.json")
    assert h100.station == "h100"
    assert sum(j.job_class == "heavy" for j in h100.jobs) == 4
    assert sum(j.job_class == "light" for j in h100.jobs) == 40


def test_the_jitter_bench_moves_each_arrival_within_its_bound_and_the_same_each_run() -> None:
    # bench/trace_jitter.py: replay 0 is the trace as published; another moves every arrival
    # by at most ±M minutes (never below 0), the same draws each run, and keeps them in arrival
    # order
    spec = importlib.util.spec_from_file_location(
        "trace_jitter", ROOT / "bench" / "trace_jitter.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    t1 = load_trace(ROOT / "traces" / "carma-philly-t1.json")
    assert script.jittered(t1, 0, 5.0) is t1
    moved = script.jittered(t1, 3, 5.0)
    assert moved == script.jittered(t1, 3, 5.0) and moved != script.jittered(t1, 4, 5.0)
    published = {j.id: j.arrival_s for j in t1.jobs}
    shifts = [m.arrival_s - published[m.id] for m in moved.jobs]
    assert all(m.arrival_s >= 0.0 for m in moved.jobs) and len(shifts) == len(published)
    # a trace's jobs are in arrival order however it was made (the simulator takes them so)
    assert [m.arrival_s for m in moved.jobs] == sorted(m.arrival_s for m in moved.jobs)
    assert [m.id for m in moved.jobs] != [j.id for j in t1.jobs]
    assert all(abs(s) <= 300.0 for s in shifts) and sum(abs(s) > 60.0 for s in shifts) > 30
