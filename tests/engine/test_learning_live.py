"""Learning on the station, live: real jobs on a SIMULATED GPU print progress lines, the engine
reads them, and a job slowed by a co-tenant under MPS teaches the model's per-co-tenant cost,
stored and shown by `gpudesk model show`. Each job's command has run alone before it shares, so
that its SM share alone (the simulated GPU's SM activity after its first progress line) is known.

The jobs run on the CPU and do not really slow each other: the watched job slows itself down
(it sleeps twice as long per step) while its co-tenant's flag file exists, so what it shows is
a rate of one half beside one light co-tenant (tests/engine/progress_jobs.py).
GPUDESK_OBSERVE_MIN_S (test-only) shortens the 60 s an interval must last to 1 s."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle, Run, wait_for
from progress_jobs import SHARER, WATCHED

from gpudesk.api import Client
from gpudesk.paths import Home
from gpudesk.policy.interference import (
    DEFAULT_PARAMS,
    PRIOR_WEIGHT,
    Observation,
    Workload,
)


@pytest.fixture
def engine(home: Home, monkeypatch: pytest.MonkeyPatch) -> Iterator[EngineHandle]:
    monkeypatch.setenv("GPUDESK_OBSERVE_MIN_S", "1")
    handle = EngineHandle(home)
    handle.start(backend="sim:h100", policy="mps", sample_interval=0.2)
    yield handle
    handle.client.close()


@pytest.mark.serial
def test_a_job_slowed_beside_another_teaches_the_model(
    engine: EngineHandle, tmp_path: Path, gpudesk: Run
) -> None:
    watched, sharer = tmp_path / "watched.py", tmp_path / "sharer.py"
    watched.write_text(WATCHED)
    sharer.write_text(SHARER)
    flag = str(tmp_path / "sharing")
    hints = {"gpus": 1, "memory_gb": 2, "sm_pct": 20}
    sharing = {"name": "sharer", "command": [sys.executable, str(sharer), flag, "3"], **hints}
    # the sharer's command runs alone first: its SM share alone is then known, which an
    # interval beside it is read with (beside a command whose share is unknown, none is)
    (earlier,) = engine.submit(sharing)
    engine.wait_all_done([earlier], timeout=30)
    (a,) = engine.submit(
        {"name": "watched", "command": [sys.executable, str(watched), flag, "7"], **hints}
    )
    engine.wait_state(a, "running")
    time.sleep(2.5)  # alone on the GPU: its rate and SM share alone
    (b,) = engine.submit({**sharing, "env": {"SHARER_QUIET": "1"}})
    placed = engine.show(b)
    engine.wait_state(b, "running")
    engine.wait_all_done([a, b], timeout=30)
    assert engine.show(b).attempts[0].placement.gpus == [0], placed
    assert engine.show(b).attempts[0].placement.mode == "mps"

    with Client.attach(engine.home) as client:
        shown = wait_for(lambda: client.model_show(), what="model_show")
    assert shown.simulated
    (h100,) = [m for m in shown.models if m.gpu_model]
    assert h100.gpus == [0]
    tenant = next(p for p in h100.params if p.name == "mps_tenant_cost")
    assert (tenant.kind, tenant.observations, tenant.calibrated) == ("learned", 1, 0)
    assert tenant.updated_at is not None
    # one observation at ~0.5x alone: the implied cost (1 - 0.5) / 1 co-tenant, mixed with
    # the prior weighted as PRIOR_WEIGHT observations
    implied = tenant.value * (PRIOR_WEIGHT + 1) - DEFAULT_PARAMS.mps_tenant_cost * PRIOR_WEIGHT
    assert 0.3 < implied < 0.7, implied
    # and the observation's own word, before the prior is weighed in
    assert tenant.observed == pytest.approx(implied)
    assert all((p.observed is None) == (p.observations == 0) for p in h100.params)
    assert shown.commands_with_rate_alone >= 1
    assert any(e.kind == "model" and "mps_tenant_cost" in e.message for e in engine.show(a).events)

    # the defaults stay as published
    (defaults,) = [m for m in shown.models if not m.gpu_model]
    assert all(p.kind in ("published", "derived", "assumption") for p in defaults.params)

    # the CLI: JSON and text
    code, out, err = gpudesk("model", "show", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["simulated"] is True
    assert any(p["kind"] == "learned" for m in data["models"] for p in m["params"])
    code, out, err = gpudesk("model", "show")
    assert code == 0, err
    assert "SIMULATED" in out
    assert "mps_tenant_cost" in out and "learned" in out
    # the top of each sharing cost's range, where `auto` judges: one observation narrows the
    # co-tenant cost's from 1.5x to 1.375x
    assert "AUTO JUDGES AT" in out and "(1.38x)" in out
    assert f"observations alone say: mps_tenant_cost {tenant.observed:.4g}" in out
    (shown_h100,) = [m for m in data["models"] if m["gpu_model"] == h100.gpu_model]
    shown_cost = next(p for p in shown_h100["params"] if p["name"] == tenant.name)
    assert shown_cost["high"] == pytest.approx(tenant.value * 1.375)
    assert h100.gpu_model in out

    # calibration probes, through the client, are labelled calibrated
    with Client.attach(engine.home) as client:
        light = Workload(0.2, 0.1)
        result = client.model_observe(
            h100.gpu_model,
            [
                Observation("mps", light, (light,), 0.9),
                Observation("mps", light, (), 1.0),  # alone: says nothing
            ],
        )
    assert (result.accepted, result.ignored, result.moved) == (1, 1, {"mps_tenant_cost": 1})
    tenant = next(p for p in result.params if p.name == "mps_tenant_cost")
    assert (tenant.kind, tenant.observations, tenant.calibrated) == ("calibrated", 2, 1)

    # reset: refused without --yes off a terminal, then back to the defaults
    code, _, err = gpudesk("model", "reset")
    assert code == 2 and "--yes" in err
    # a model the station neither has nor learned about: a typo, refused, nothing dropped
    code, _, err = gpudesk("model", "reset", "--gpu-model", "H100 80GB", "--yes")
    assert code == 2 and f"its models: {h100.gpu_model}" in " ".join(err.split()), err
    code, out, err = gpudesk("model", "reset", "--yes")
    assert code == 0, err
    # the co-tenant cost, and the kernel-active gap where the monitor read the watched job
    # alone often enough (tests/engine/test_learning.py checks that reading on its own)
    learned = [p.name for p in result.params if p.observations]
    assert learned[0] == "mps_tenant_cost" and set(learned) <= {
        "mps_tenant_cost",
        "kernel_active_extra",
    }
    assert f"{len(learned)} learned parameter(s) dropped" in out
    code, out, _ = gpudesk("model", "show", "--json")
    data = json.loads(out)
    assert all(p["observations"] == 0 for m in data["models"] for p in m["params"])
