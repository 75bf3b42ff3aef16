"""The engine's MIG plan (`mig_plan`, `mig_apply`, `gpudesk mig plan / apply-plan`) with a real
daemon: on a simulated DGX Station A100 whose GPU 3 is in MIG mode, and on a real station whose
NVML and nvidia-smi are the faithful fakes (tests/fakes).

The setup keeps the MIG-suited jobs queued deterministically: three heavy jobs fill GPUs 0-2
(38 GB each: nothing else fits next to them) and GPU 3's one 1g.5gb slice is too small for them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EngineHandle, Run, wait_for

from gpudesk.api.errors import EngineError
from gpudesk.core.wire.base import to_builtins
from gpudesk.paths import Home

FAKES = Path(__file__).resolve().parents[1] / "fakes"
FAKE_SMI = FAKES / "nvidia-smi"
SLEEP = ["sleep", "120"]  # every job here is killed by the home fixture's cleanup
HEAVY = {"command": SLEEP, "gpus": 1, "memory_gb": 38, "sm_pct": 100}
WANTED = ["2g.10gb", "3g.20gb", "2g.10gb"]


def slice_profiles(engine: EngineHandle, gpu: int) -> list[str] | None:
    snapshot = engine.api.telemetry().snapshot
    if snapshot is None:
        return None
    return [m.profile for m in snapshot.gpus[gpu].mig_devices]


def mig_events(home: Home) -> list[str]:
    with contextlib.closing(sqlite3.connect(f"file:{home.db}?mode=ro", uri=True)) as conn:
        return [
            row[0]
            for row in conn.execute(
                "SELECT message FROM events WHERE kind = 'mig' AND job_id IS NULL ORDER BY id"
            )
        ]


class Station:
    """A simulated DGX Station A100, GPU 3 in MIG mode with one 1g.5gb slice, GPUs 0-2 busy,
    and four MIG-suited jobs queued: a (8 GB, 20 % SM), b (16 GB, 40 %), c (6 GB, 10 %) and
    e (12 GB, 30 %)."""

    def __init__(self, home: Home, *, mig_repartition: bool, policy: str = "auto") -> None:
        self.engine = EngineHandle(home)
        self.engine.start(
            backend="sim:dgx-station-a100",
            sample_interval=0.2,
            mig={"3": "1g.5gb"},
            mig_repartition=mig_repartition,
            policy=policy,
        )
        wait_for(
            lambda: slice_profiles(self.engine, 3) == ["1g.5gb"],
            what="GPU 3's MIG slice in telemetry",
        )
        self.heavy = self.engine.submit(*({"name": f"heavy{i}", **HEAVY} for i in range(3)))
        for job_id in self.heavy:
            self.engine.wait_state(job_id, "running")
        self.a, self.b, self.c, self.e = self.engine.submit(
            *(
                {"name": name, "command": SLEEP, "gpus": 1, "memory_gb": memory, "sm_pct": sm}
                for name, memory, sm in (("a", 8, 20), ("b", 16, 40), ("c", 6, 10), ("e", 12, 30))
            )
        )
        self.queued = [self.a, self.b, self.c, self.e]

    def states(self) -> list[str]:
        return [self.engine.job(j).state for j in self.queued]


@pytest.fixture
def locked_station(home: Home) -> Iterator[Station]:
    station = Station(home, mig_repartition=False)
    yield station
    station.engine.client.close()


@pytest.fixture
def open_station(home: Home) -> Iterator[Station]:
    """Repartitioning allowed, under a forced mode (mps), which never changes a layout on its
    own: the plan is applied by hand."""
    station = Station(home, mig_repartition=True, policy="mps")
    yield station
    station.engine.client.close()


def test_the_plan_shows_the_layout_the_queue_wants(locked_station: Station, gpudesk: Run) -> None:
    station, client = locked_station, locked_station.engine.api
    result = client.mig_plan(None)
    assert result.simulated is True
    plans = {p.gpu: p for p in result.plans}
    assert sorted(plans) == [0, 1, 2, 3]
    gpu3 = plans[3]
    assert (gpu3.mig_enabled, gpu3.current, gpu3.wanted) == (True, ["1g.5gb"], WANTED)
    assert [s.job_id for s in gpu3.slices] == [station.a, station.b, station.c]
    assert [j.job_id for j in gpu3.left_out] == [station.e]  # no room after a, b, c
    assert gpu3.commands == [
        "nvidia-smi mig -i 3 -dci",
        "nvidia-smi mig -i 3 -dgi",
        "nvidia-smi mig -i 3 -cgi 9,14,14 -C",
        "nvidia-smi -L",
    ]
    assert gpu3.allowed is False
    assert [b.code for b in gpu3.blockers] == ["config"]
    # GPUs 0-2: not in MIG mode and busy; they plan for what GPU 3 left (job e)
    gpu0 = plans[0]
    assert [b.code for b in gpu0.blockers] == ["mig-mode", "busy", "config"]
    assert "sudo nvidia-smi -i 0 -mig 1" in gpu0.enable_hint
    assert gpu0.running_jobs == [station.heavy[0]]
    assert [s.job_id for s in gpu0.slices] == [station.e]
    assert gpu0.wanted == ["3g.20gb", "3g.20gb"] and gpu0.spare == ["3g.20gb"]
    assert plans[1].slices == plans[2].slices == []  # job e is GPU 0's: a job runs on one GPU
    assert client.mig_plan(3).plans == [gpu3]

    code, out, _ = gpudesk("mig", "plan", "--gpu", "3")
    assert code == 0
    assert "GPU 3: NVIDIA A100-SXM4-40GB  MIG enabled  [SIMULATED]" in out
    assert "current  1g.5gb" in out and "wanted   2g.10gb, 3g.20gb, 2g.10gb" in out
    assert "nvidia-smi mig -i 3 -cgi 9,14,14 -C" in out
    assert "can apply: no. The station config does not allow" in out
    # what auto would make of it: nothing starts on 1g.5gb, so it would pay, if allowed
    assert gpu3.auto.startswith("GPU 3: 1g.5gb -> 2g.10gb, 3g.20gb, 2g.10gb")
    assert gpu3.auto.endswith("it pays; auto changes it only with [station] mig_repartition = true")
    assert "auto: GPU 3: 1g.5gb -> 2g.10gb, 3g.20gb, 2g.10gb" in out
    assert plans[0].auto is None  # busy and not in MIG mode: not weighed
    # what the layout costs the queue, as if GPU 3 alone ran it: said, on a 4-GPU station
    assert gpu3.queue_time is not None and gpu3.queue_time.layout == WANTED
    assert any("the station's 4 GPUs share the queue" in n for n in gpu3.queue_time.notes)
    code, out, _ = gpudesk("mig", "plan", "--json")
    assert code == 0 and json.loads(out)["plans"][3]["wanted"] == WANTED

    with pytest.raises(EngineError) as refused:
        client.mig_apply(3, WANTED, confirm=True)
    assert refused.value.code == "refused" and "mig_repartition = true" in str(refused.value)
    code, _, err = gpudesk("mig", "apply-plan", "--gpu", "3", "--yes")
    assert code == 1 and "cannot be applied" in err and "mig_repartition" in err
    assert "Traceback" not in err

    with pytest.raises(EngineError) as unknown:
        client.mig_plan(9)
    assert unknown.value.code == "invalid_args" and "GPU 9" in str(unknown.value)
    code, _, err = gpudesk("mig", "plan", "--gpu", "9")
    assert code == 2 and "error: GPU 9 is not a MIG-capable GPU" in err

    # nothing changed: the layout, the queue
    assert slice_profiles(station.engine, 3) == ["1g.5gb"]
    assert station.states() == ["queued"] * 4 and mig_events(station.engine.home) == []


def test_applying_the_plan_repartitions_the_simulated_gpu(
    open_station: Station, gpudesk: Run
) -> None:
    station, client = open_station, open_station.engine.api
    (gpu3,) = client.mig_plan(3).plans
    assert gpu3.allowed and gpu3.wanted == WANTED
    assert gpu3.auto.endswith("it pays; the mps policy never changes a layout on its own")

    with pytest.raises(EngineError) as busy:  # GPU 0: heavy0 runs on it, and MIG mode is off
        client.mig_apply(0, ["7g.40gb"], confirm=True)
    assert busy.value.code == "refused"
    assert "MIG mode is not enabled on GPU 0" in str(busy.value)
    assert f"Job(s) {station.heavy[0]} run on GPU 0" in str(busy.value)
    with pytest.raises(EngineError) as unconfirmed:
        client.mig_apply(3, WANTED, confirm=False)
    assert unconfirmed.value.code == "refused" and "not confirmed" in str(unconfirmed.value)
    with pytest.raises(EngineError) as too_big:
        client.mig_apply(3, ["3g.20gb", "3g.20gb", "1g.5gb"], confirm=True)
    assert too_big.value.code == "invalid_args" and "does not fit" in str(too_big.value)
    code, _, err = gpudesk("mig", "apply-plan", "--gpu", "3")  # no terminal, no --yes
    assert code == 2 and "needs confirmation" in err and "--yes" in err
    assert slice_profiles(station.engine, 3) == ["1g.5gb"]

    code, out, err = gpudesk("mig", "apply-plan", "--gpu", "3", "--yes")
    assert (code, err) == (0, "")
    assert "MIG layout of GPU 3 applied: 2g.10gb, 3g.20gb, 2g.10gb (was 1g.5gb) [SIMULATED]" in out
    # telemetry and placement see the new slices: a, b and c start on them; e still waits
    assert slice_profiles(station.engine, 3) == WANTED
    for job_id, profile in zip(
        (station.a, station.b, station.c), ("2g.10gb", "3g.20gb", "2g.10gb"), strict=True
    ):
        assert station.engine.wait_state(job_id, "running").slot == f"gpu:3/{profile}"
    assert station.engine.job(station.e).state == "queued"
    assert client.status().station.mig == {"3": "2g.10gb,3g.20gb,2g.10gb"}
    assert mig_events(station.engine.home) == [
        "MIG layout of GPU 3 applied: 2g.10gb, 3g.20gb, 2g.10gb (was 1g.5gb) [SIMULATED]"
    ]
    (after,) = client.mig_plan(3).plans
    assert "busy" in [b.code for b in after.blockers]


def test_auto_repartitions_an_idle_mig_gpu_when_it_pays(home: Home, gpudesk: Run) -> None:
    """`auto` with mig_repartition = true: GPU 3's 1g.5gb starts none of a, b, c, e, so the
    engine gives it the planned layout itself, says why, and a, b and c start on it."""
    station = Station(home, mig_repartition=True)
    try:
        for job_id, profile in zip(
            (station.a, station.b, station.c), ("2g.10gb", "3g.20gb", "2g.10gb"), strict=True
        ):
            assert station.engine.wait_state(job_id, "running").slot == f"gpu:3/{profile}"
        assert station.engine.job(station.e).state == "queued"
        assert slice_profiles(station.engine, 3) == WANTED
        events = mig_events(station.engine.home)
        assert len(events) == 2, events
        why, applied = events
        assert why.startswith("repartitioning for the queue: GPU 3: 1g.5gb -> " + ", ".join(WANTED))
        assert "predicted work rate 0.00 (jobs none) -> " in why and "it pays" in why
        assert applied == (
            "MIG layout of GPU 3 applied: 2g.10gb, 3g.20gb, 2g.10gb (was 1g.5gb) [SIMULATED]"
        )
        code, out, _ = gpudesk("show", str(station.b))
        said = " ".join(out.split())  # show wraps its events to the terminal
        assert code == 0 and "GPU 3 repartitioned for it" in said and "a 3g.20gb slice" in said
    finally:
        station.engine.client.close()


def test_the_printed_plan_its_commands_auto_and_json_agree(home: Home, gpudesk: Run) -> None:
    """The walk-through: GPU 3 in MIG mode (3g.20gb,2g.10gb,2g.10gb), the station drained so
    the queue stays as it is, 4, 4, 8 and 15 GB jobs queued and a held one behind them. The
    printed plan, its -cgi line, its auto line and --json name one layout, the room left
    carved into a spare 1g.5gb (as auto carves it); the held job is said held; no job is given
    a slice on two GPUs."""
    engine = EngineHandle(home)
    engine.start(backend="sim:dgx-station-a100", mig={"3": "3g.20gb,2g.10gb,2g.10gb"})
    try:
        engine.api.drain("a test: the queue stays as it is")
        jobs = [
            {"name": f"j{i}", "command": SLEEP, "gpus": 1, "memory_gb": memory, "sm_pct": 20}
            for i, memory in enumerate((4, 4, 8, 15))
        ]
        *ids, held = engine.submit(*jobs, {**jobs[0], "name": "later"})
        engine.api.hold([held])
        layout = ["2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb"]
        code, out, _ = gpudesk("mig", "plan", "--json")
        plans = json.loads(out)["plans"]
        gpu3 = plans[3]
        assert code == 0 and gpu3["wanted"] == layout and gpu3["spare"] == ["1g.5gb"]
        assert [s["job_id"] for s in gpu3["slices"]] == ids[:3]
        assert f"-> {', '.join(layout)}:" in gpu3["auto"]
        assert "not the layout shown" not in gpu3["auto"]
        given = [s["job_id"] for p in plans for s in p["slices"]]
        assert len(given) == len(set(given)) and held not in given, given
        code, out, _ = gpudesk("mig", "plan")
        said = " ".join(out.split())
        assert code == 0 and f"wanted {', '.join(layout)}" in said
        assert "nvidia-smi mig -i 3 -cgi 14,14,14,19 -C" in said
        assert f"auto: GPU 3: 3g.20gb, 2g.10gb, 2g.10gb -> {', '.join(layout)}:" in said
        assert f"job {held} later: held: it starts only once released" in said
        assert "1g.5gb - (spare: for jobs to come)" in said
    finally:
        engine.client.close()


# ------------------------------------------------------------------------ a real station
@contextlib.contextmanager
def real_station(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str
) -> Iterator[tuple[EngineHandle, Path, Path]]:
    """An engine on a real station whose NVML and nvidia-smi are the faithful fakes: an A100 in
    MIG mode with two 3g.20gb instances. Yields the engine, nvidia-smi's state and its log;
    stops the engine after."""
    smi_state, smi_log = tmp_path / "smi.json", tmp_path / "smi-calls.jsonl"
    uuids = [f"MIG-0000000{gi}-0000-5000-8000-000000000000" for gi in (1, 2)]
    smi_state.write_text(
        json.dumps(
            {
                "root": True,
                "gpus": [
                    {
                        "name": "NVIDIA A100-SXM4-40GB",
                        "uuid": "GPU-e86cb44c-6756-fd30-cd4a-1e6da3caf9b0",
                        "pci_bus_id": "00000000:07:00.0",
                        "mig_mode": "enabled",
                        "gpu_instances": [
                            {
                                "id": gi,
                                "profile_id": 9,
                                "start": start,
                                "size": 4,
                                "compute_instances": [
                                    {"id": 0, "profile_id": 2, "start": 0, "size": 3, "uuid": uuid}
                                ],
                            }
                            for gi, start, uuid in ((1, 0, uuids[0]), (2, 4, uuids[1]))
                        ],
                    }
                ],
            }
        )
    )
    nvml = tmp_path / "nvml.json"
    nvml.write_text(
        json.dumps(
            {
                # one driver behind both fakes: NVML lists the MIG devices nvidia-smi keeps
                "follow_nvidia_smi": True,
                "gpus": [
                    {
                        "name": "NVIDIA A100-SXM4-40GB",
                        "uuid": "GPU-e86cb44c-6756-fd30-cd4a-1e6da3caf9b0",
                        "memory_total_mib": 40960,
                    }
                ],
            }
        )
    )
    monkeypatch.setenv("GPUDESK_NVIDIA_SMI", str(FAKE_SMI))
    monkeypatch.setenv("GPUDESK_FAKE_NVIDIA_SMI_STATE", str(smi_state))
    monkeypatch.setenv("GPUDESK_FAKE_NVIDIA_SMI_LOG", str(smi_log))
    monkeypatch.setenv("PYTHONPATH", str(FAKES / "nvml_shim"))
    monkeypatch.setenv("GPUDESK_FAKE_NVML", str(nvml))
    engine = EngineHandle(home)
    engine.start(backend="nvml", sample_interval=0.2, mig_repartition=True, policy=policy)
    try:
        yield engine, smi_state, smi_log
    finally:
        engine.stop()
        engine.client.close()


def test_the_nvml_fake_lists_what_the_nvidia_smi_fake_created(tmp_path: Path) -> None:
    """The two fakes are one driver: NVML lists the compute instances `nvidia-smi mig` created,
    in the order and with the names `nvidia-smi -L` gives them; a compute instance smaller than
    its GPU instance is a "1c.3g.20gb" with its share of the SMs."""
    name, uuid = "NVIDIA A100-SXM4-40GB", "GPU-e86cb44c-6756-fd30-cd4a-1e6da3caf9b0"
    state, nvml = tmp_path / "smi.json", tmp_path / "nvml.json"
    gpu = {"name": name, "uuid": uuid, "pci_bus_id": "00000000:07:00.0", "mig_mode": "enabled"}
    state.write_text(json.dumps({"root": True, "gpus": [{**gpu, "gpu_instances": []}]}))
    nvml.write_text(
        json.dumps(
            {
                "follow_nvidia_smi": True,
                "gpus": [{"name": name, "uuid": uuid, "memory_total_mib": 40960}],
            }
        )
    )
    env = {
        **os.environ,
        "GPUDESK_FAKE_NVIDIA_SMI_STATE": str(state),
        "GPUDESK_FAKE_NVML": str(nvml),
        "PYTHONPATH": str(FAKES / "nvml_shim"),
    }

    def smi(*args: str) -> str:
        done = subprocess.run(
            [str(FAKE_SMI), *args], env=env, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stdout
        return done.stdout

    smi("mig", "-i", "0", "-cgi", "2g.10gb,3g.20gb")  # GPU instances 5 and 1, no compute ones
    smi("mig", "-i", "0", "-cgi", "1g.5gb", "-C")
    smi("mig", "-i", "0", "-gi", "1", "-cci", "0,0,0")  # three 1c.3g.20gb
    smi("mig", "-i", "0", "-gi", "5", "-cci", "1")
    # "  MIG 1c.3g.20gb Device 0: (UUID: MIG-...)"
    listed = [line.split() for line in smi("-L").splitlines() if line.startswith("  MIG ")]
    code = (
        "import json\n"
        "from gpudesk.hw.telemetry.nvml import NvmlBackend\n"
        "b = NvmlBackend(); b.open(); (g,) = b.read().gpus; b.close()\n"
        "print(json.dumps([[m.name, m.uuid, m.sm_count] for m in g.mig_devices]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    devices = json.loads(done.stdout)
    assert [(n, u) for n, u, _ in devices] == [
        (f"{name} MIG {words[1]}", words[-1].rstrip(")")) for words in listed
    ]
    assert [(n.rsplit(" ", 1)[-1], sm) for n, _, sm in devices] == [
        *[("1c.3g.20gb", 14)] * 3,
        ("2g.10gb", 28),
        ("1g.5gb", 14),
    ]


def submit_big_jobs(engine: EngineHandle, command: list[str]) -> list[int]:
    """Two 24 GB jobs: neither fits a 3g.20gb."""
    return engine.submit(
        *(
            {"name": f"big{i}", "gpus": 1, "memory_gb": 24, "sm_pct": 50, "command": command}
            for i in range(2)
        )
    )


def test_a_real_station_plans_and_applies_through_nvidia_smi(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a forced mode (mps) the engine never repartitions on its own: the plan is shown
    and applied by hand."""
    with real_station(home, tmp_path, monkeypatch, "mps") as (engine, smi_state, smi_log):
        first, second = submit_big_jobs(engine, SLEEP)
        (plan,) = engine.api.mig_plan(0).plans
        assert (plan.simulated, plan.current, plan.wanted) == (
            False,
            ["3g.20gb", "3g.20gb"],
            ["7g.40gb"],
        )
        assert [s.job_id for s in plan.slices] == [first]
        assert [j.job_id for j in plan.left_out] == [second]
        smi = str(FAKE_SMI)
        assert plan.commands == [
            f"{smi} mig -i 0 -dci",
            f"{smi} mig -i 0 -dgi",
            f"{smi} mig -i 0 -cgi 0 -C",
            f"{smi} -L",
        ]
        assert plan.allowed is True

        result = engine.api.mig_apply(0, plan.wanted, confirm=True)
        assert (result.applied, result.previous, result.simulated) == (
            True,
            ["3g.20gb", "3g.20gb"],
            False,
        )
        assert result.commands == plan.commands
        calls = [json.loads(line) for line in smi_log.read_text().splitlines()]
        changing = [c for c in calls if any(a in ("-dci", "-dgi", "-cgi") for a in c)]
        assert changing == [
            ["mig", "-i", "0", "-dci"],
            ["mig", "-i", "0", "-dgi"],
            ["mig", "-i", "0", "-cgi", "0", "-C"],
        ]
        assert calls[-3:][0] == ["-L"]  # read back: -L, then the instances
        (device,) = result.mig_devices
        assert device.profile == "7g.40gb" and device.uuid.startswith("MIG-")
        gis = json.loads(smi_state.read_text())["gpus"][0]["gpu_instances"]
        assert [gi["profile_id"] for gi in gis] == [0]
        # applying never touches the queue; the next pass sees the new instance through NVML
        assert engine.wait_state(first, "running").slot == "gpu:0/7g.40gb"
        assert engine.job(second).state == "queued"


def test_auto_repartitions_a_real_gpu_through_nvidia_smi(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`auto`: the engine runs the planner's nvidia-smi commands itself, once; NVML then lists
    the 7g.40gb instance nvidia-smi created (the two fakes are one driver) and the first job
    starts on it. The second waits for it: it fits no other slice."""
    with real_station(home, tmp_path, monkeypatch, "auto") as (engine, smi_state, smi_log):

        def changing() -> list[list[str]]:
            lines = smi_log.read_text().splitlines() if smi_log.exists() else []
            calls = [json.loads(line) for line in lines]
            return [c for c in calls if any(a in ("-dci", "-dgi", "-cgi") for a in c)]

        first, second = submit_big_jobs(engine, SLEEP)
        wait_for(lambda: len(changing()) == 3, what="the engine's nvidia-smi commands")
        assert changing() == [
            ["mig", "-i", "0", "-dci"],
            ["mig", "-i", "0", "-dgi"],
            ["mig", "-i", "0", "-cgi", "0", "-C"],
        ]
        # the fake logs a call before it saves what the call did: wait for the state too
        wait_for(
            lambda: (
                [
                    gi["profile_id"]
                    for gi in json.loads(smi_state.read_text())["gpus"][0]["gpu_instances"]
                ]
                == [0]
            ),
            what="the 7g.40gb instance in nvidia-smi's state",
        )
        why, applied = wait_for(lambda: len(e := mig_events(home)) == 2 and e, what="events")
        assert why.startswith("repartitioning for the queue: GPU 0: 3g.20gb, 3g.20gb -> 7g.40gb")
        assert "0.00 (jobs none) -> 1.00 (jobs 1)" in why
        assert applied.startswith("MIG layout of GPU 0 applied: 7g.40gb (was 3g.20gb, 3g.20gb)")
        (device,) = json.loads(smi_state.read_text())["gpus"][0]["gpu_instances"][0][
            "compute_instances"
        ]
        running = engine.wait_state(first, "running")
        assert running.slot == "gpu:0/7g.40gb"
        # CUDA_VISIBLE_DEVICES=MIG-...
        assert device["uuid"] in json.dumps(to_builtins(engine.job(first)))
        engine.submit({"name": "later", "gpus": 0, "command": [sys.executable, "-c", "pass"]})
        time.sleep(1.0)  # more scheduling passes: a busy GPU is never re-carved
        assert len(changing()) == 3
        assert engine.job(second).state == "queued"


def test_a_job_waiting_for_a_slice_starts_on_one_an_admin_carves_by_hand(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An admin changes the layout with nvidia-smi, outside gpudesk: the next sample shows the
    new instance and placement looks again, with no job or request to prompt it."""
    with real_station(home, tmp_path, monkeypatch, "mps") as (engine, smi_state, _):
        (job,) = engine.submit(
            {"name": "big", "gpus": 1, "memory_gb": 24, "sm_pct": 50, "command": SLEEP}
        )
        time.sleep(1.0)  # several samples and passes: it fits neither 3g.20gb
        assert engine.job(job).state == "queued"
        env = {**os.environ, "GPUDESK_FAKE_NVIDIA_SMI_STATE": str(smi_state)}
        for args in (["-dci"], ["-dgi"], ["-cgi", "0", "-C"]):
            done = subprocess.run(
                [str(FAKE_SMI), "mig", "-i", "0", *args], env=env, capture_output=True, text=True
            )
            assert done.returncode == 0, done.stdout
        assert engine.wait_state(job, "running").slot == "gpu:0/7g.40gb"


def test_auto_does_not_repartition_for_jobs_that_cannot_start(home: Home) -> None:
    """Jobs waiting for another job (`after`), and then doomed by its cancel, are not what an
    idle MIG GPU is re-carved for: none of them may start on it. Once a job that may start
    waits, the same station repartitions for it (the test can see a repartition)."""
    engine = EngineHandle(home)
    engine.start(
        backend="sim:dgx-station-a100",
        sample_interval=0.2,
        mig={"3": "1g.5gb"},
        mig_repartition=True,
    )
    try:
        wait_for(lambda: slice_profiles(engine, 3) == ["1g.5gb"], what="GPU 3's MIG slice")
        heavy = engine.submit(*({"name": f"heavy{i}", **HEAVY} for i in range(3)))
        (dep,) = engine.submit({"name": "dep", "command": SLEEP})  # on the CPU
        for job_id in (*heavy, dep):
            engine.wait_state(job_id, "running")
        blocked = engine.submit(
            *(
                {"name": name, "command": SLEEP, "gpus": 1, "memory_gb": memory, "sm_pct": sm}
                | {"after": [dep]}
                for name, memory, sm in (("a", 8, 20), ("b", 16, 40), ("c", 6, 10))
            )
        )
        wait_for(
            lambda: all("dep" in (engine.show(j).waiting or "") for j in blocked),
            what="the blocked jobs' wait on dep",
        )
        engine.api.cancel([dep])  # dooms them: each is cancelled, never started
        for job_id in blocked:
            engine.wait_state(job_id, "cancelled")
        assert slice_profiles(engine, 3) == ["1g.5gb"]
        assert mig_events(engine.home) == []
        (free,) = engine.submit({"name": "b2", "command": SLEEP, "gpus": 1, "memory_gb": 16})
        assert engine.wait_state(free, "running").slot.startswith("gpu:3/")
        assert any(e.startswith("repartitioning for the queue") for e in mig_events(engine.home))
    finally:
        engine.client.close()
