"""bench/hw_raw_probe.py on gpudesk's hardware fakes: it records every section, asks the driver
nothing but getters and read-only listings, and its --compare mode finds what differs."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from gpudesk.hw.mig.nvidia_smi import ENV_NVIDIA_SMI
from gpudesk.hw.mps import CONTROL_BINARY, CONTROL_ENV, PID_FILE

# its module-scoped fixture is made once: the module stays on one worker (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("test_hw_raw_probe")

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "bench" / "hw_raw_probe.py"

# What a read-only probe may call: NVML getters and queries, GPM sampling (which only reads into
# buffers it allocates), init and shutdown.
NVML_READ_ONLY = re.compile(
    r"nvmlInit|nvmlShutdown|nvml(Device|System)Get\w+|nvmlGpm(QueryDeviceSupport|SampleAlloc"
    r"|SampleGet|SampleFree|MetricsGet)"
)
STATE_CHANGING = re.compile(r"Set|Create|Destroy|Reset|Clear|Enable|Disable|Register")
SMI_CHANGING = {"-mig", "-cgi", "-cci", "-dgi", "-dci", "-r", "-pm", "-pl", "-c", "-lgc", "-rgc"}


def probe(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(PROBE), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("probe") / "fake.json"
    # the torch clients are tests/fakes/cuda-python: a CUDA client without a GPU
    done = probe("--fakes", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out, json.loads(out.read_text())


@pytest.mark.slow(8)
def test_a_run_on_the_fakes_records_every_section(fake_run: tuple[Path, dict]) -> None:
    _, doc = fake_run
    assert doc["probe"]["fakes"] is True and doc["probe"]["finished"] is True
    assert doc["probe"]["sections_done"] == [
        "nvml-open",
        "torch",
        "nvml-idle",
        "nvidia_smi",
        "mps",
        "nvml-load",
        "nvml-close",
        "fakes",
    ]
    assert "section_errors" not in doc["probe"]
    calls = {c["key"]: c for c in doc["nvml"]["calls"]}
    memory = calls["idle/gpu0 nvmlDeviceGetMemoryInfo(version=nvmlMemory_v2)"]
    assert memory["ok"] and memory["type"] == "c_nvmlMemory_v2_t"
    assert set(memory["value"]) == {"version", "total", "reserved", "free", "used"}
    # a failure is an answer like any other: class, NVML code and text
    assert calls["idle/gpu0 nvmlDeviceGetProcessUtilization(timeStamp=0)"]["error"] == {
        "class": "NVMLError_NotFound",
        "bases": ["NVMLError"],
        "value": 6,
        "str": "Not Found",
    }
    # GPM: two samples, the metrics asked for, both samples freed
    gpm = calls["idle/gpu0 nvmlGpmMetricsGet(SM_UTIL+DRAM_BW_UTIL)"]["value"]
    wanted = [pynvml.NVML_GPM_METRIC_SM_UTIL, pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL]
    assert [m["metricId"] for m in gpm["metrics"]] == wanted
    # under a load (the fake CUDA client) and with MPS clients the same calls are asked again
    assert doc["nvml"]["load"]["client"]["event"] == "ready"
    assert "load/gpu0 nvmlDeviceGetProcessUtilization(timeStamp=newest)" in calls
    assert "mps/gpu0 nvmlDeviceGetComputeRunningProcesses" in calls
    assert doc["torch"]["seen"]["cuda_available"] is True

    runs = {r["key"]: r for r in doc["nvidia_smi"]["runs"]}
    assert runs["-L"]["rc"] == 0 and runs["-L"]["stdout"].startswith("GPU 0: NVIDIA H200 (UUID: ")
    assert runs["mig -lgi"]["stdout"] == "No MIG-enabled devices found.\n"

    steps = {s["key"]: s for s in doc["mps"]["steps"]}
    assert steps["get_server_list before the daemon"]["stderr"].startswith(
        "Cannot find MPS control daemon process"
    )
    assert steps["daemon answers"]["answered"] is True
    assert {f["name"] for f in steps["folders while running"]["files"]["pipe"]} >= {
        "control",
        "nvidia-cuda-mps-control.pid",
    }
    server = steps["get_server_list with clients"]["stdout"].split()
    assert server and steps["get_server_status <server pid>"]["stdout"].strip() == "ACTIVE"
    assert steps["quit"]["rc"] == 0 and all(doc["mps"]["ended"].values())
    assert "control.log" in doc["mps"]["log_tails"]
    assert "$TMP" in json.dumps(doc["mps"]) and "gpudesk-mps-probe-" not in json.dumps(doc["mps"])


def test_the_probe_asks_nothing_that_changes_the_gpu(fake_run: tuple[Path, dict]) -> None:
    _, doc = fake_run
    probed = {c["fn"] for c in doc["nvml"]["calls"]}
    # the fake counts the versioned memory call apart, as nvmlDeviceGetMemoryInfo_v2
    seen_by_fake = {name.removesuffix("_v2") for name in doc["fakes"]["nvml_calls"]}
    assert seen_by_fake <= probed  # the fake saw no call the record leaves out
    for name in probed | seen_by_fake:
        assert NVML_READ_ONLY.fullmatch(name) and not STATE_CHANGING.search(name), name
    argvs = doc["fakes"]["nvidia_smi_argv"]
    assert ["-L"] in argvs and ["mig", "-i", "0", "-lgi"] in argvs
    for argv in argvs:
        assert not SMI_CHANGING & set(argv), argv
    sent = [s["stdin"].strip() for s in doc["mps"]["steps"] if "stdin" in s]
    assert {c.split()[0] for c in sent} <= {
        "get_server_list",
        "get_server_status",
        "get_client_list",
        "get_default_active_thread_percentage",
        "no_such_command",
        "quit",
    }


def test_compare_finds_nothing_between_two_records_of_the_same_fakes(
    fake_run: tuple[Path, dict],
) -> None:
    path, _ = fake_run
    done = probe("--compare", str(path), "--against", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\d+ same, \d+ differ in numbers only, 0 differ, 0 recorded", done.stdout)


def test_compare_names_each_difference(fake_run: tuple[Path, dict], tmp_path: Path) -> None:
    path, doc = fake_run
    real = copy.deepcopy(doc)
    calls = {c["key"]: c for c in real["nvml"]["calls"]}
    calls["idle/gpu0 nvmlDeviceGetPowerUsage"].update(
        ok=False,
        error={"class": "NVMLError_NotSupported", "bases": ["NVMLError"], "value": 3, "str": "x"},
    )
    del calls["idle/gpu0 nvmlDeviceGetMemoryInfo(version=nvmlMemory_v2)"]["value"]["reserved"]
    runs = {r["key"]: r for r in real["nvidia_smi"]["runs"]}
    runs["-L"]["stdout"] = runs["-L"]["stdout"].replace("(UUID: ", "(UUID:")
    runs["mig -lgi"]["stdout"] = "No MIG-enabled devices found.\n"  # the same text: not listed
    real_path = tmp_path / "real.json"
    real_path.write_text(json.dumps(real))

    done = probe("--compare", str(real_path), "--against", str(path))
    assert done.returncode == 1, done.stderr
    flagged = [line for line in done.stdout.splitlines() if line.startswith("  DIFFERS")]
    assert flagged == [
        "  DIFFERS  idle/gpu0 nvmlDeviceGetMemoryInfo(version=nvmlMemory_v2): value shape "
        "(fields or types)",
        "  DIFFERS  idle/gpu0 nvmlDeviceGetPowerUsage: "
        "real NVMLError_NotSupported(3) | other ok int",
        "  DIFFERS  -L: stdout differs",
    ]
    assert "+GPU 0: NVIDIA H200 (UUID: GPU-" in done.stdout  # the text diff, line by line


def test_bad_input_is_one_paragraph(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    done = probe("--compare", str(broken), "--against", str(broken))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "cannot read" in done.stderr


def test_the_probe_uses_gpudesks_names_for_the_tools() -> None:
    """The probe runs without gpudesk installed, so it repeats these; they must not drift."""
    source = PROBE.read_text()
    for name, value in (
        ("ENV_NVIDIA_SMI", ENV_NVIDIA_SMI),
        ("ENV_MPS_CONTROL", CONTROL_ENV),
        ("MPS_CONTROL_BINARY", CONTROL_BINARY),
        ("MPS_PID_FILE", PID_FILE),
    ):
        assert f'{name} = "{value}"' in source, name
    assert not re.search(r"^\s*(import|from) gpudesk", source, re.MULTILINE)


@pytest.mark.slow(6)
def test_compare_on_the_fakes_sets_them_up_like_the_recorded_gpu(
    fake_run: tuple[Path, dict], tmp_path: Path
) -> None:
    """--fakes --compare gives the fakes the recorded GPU's name, UUID and memory, so that what
    it lists is how the fakes answer, not which GPU they pretend to be. (Another H200 model:
    the fake nvidia-smi picks its MIG profile table by the name.)"""
    _, doc = fake_run
    text = json.dumps(doc).replace("NVIDIA H200", "NVIDIA H200 NVL")
    other = json.loads(text.replace("GPU-9d0f7a5e", "GPU-1d0f7a5e"))
    calls = {c["key"]: c for c in other["nvml"]["calls"]}
    memory = calls["idle/gpu0 nvmlDeviceGetMemoryInfo(version=nvmlMemory_v2)"]["value"]
    memory["total"] = 81559 * 2**20
    recorded = tmp_path / "h200-nvl.json"
    recorded.write_text(json.dumps(other))

    done = probe("--fakes", "--compare", str(recorded))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DIFFERS" not in done.stdout and "ONLY-" not in done.stdout
    assert " -L" not in done.stdout  # nvidia-smi -L names the same GPU


def test_a_driver_that_fails_is_recorded_and_the_rest_still_runs(tmp_path: Path) -> None:
    """NVML that cannot start, no nvidia-smi, no MPS binary, no torch: each is an answer in the
    record, and the probe finishes."""
    scenario = tmp_path / "nvml.json"
    scenario.write_text(json.dumps({"init_error": "LibRmVersionMismatch", "gpus": [{}]}))
    env = {
        "PATH": str(tmp_path),  # neither nvidia-smi nor nvidia-cuda-mps-control
        "PYTHONPATH": str(REPO / "tests" / "fakes" / "nvml_shim"),
        "GPUDESK_FAKE_NVML": str(scenario),
    }
    out = tmp_path / "out.json"
    done = subprocess.run(
        [sys.executable, str(PROBE), "--out", str(out), "--python", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert doc["probe"]["finished"] and "section_errors" not in doc["probe"]
    (init,) = doc["nvml"]["calls"]
    assert init["error"]["class"] == "NVMLError_LibRmVersionMismatch"
    assert doc["torch"]["error"]["class"] == "FileNotFoundError"
    assert doc["nvidia_smi"]["skipped"].startswith("nvidia-smi not on PATH")
    assert doc["mps"]["skipped"] == "nvidia-cuda-mps-control not found"


def test_the_watchdog_writes_what_was_recorded_at_the_time_limit(tmp_path: Path) -> None:
    """A call that never returns (here: a sleep) cannot keep the probe past --time-limit."""
    out = tmp_path / "out.json"
    code = (
        "import argparse, importlib.util, sys, time\n"
        f"spec = importlib.util.spec_from_file_location('probe', {str(PROBE)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        f"args = argparse.Namespace(time_limit=1.0, gpu=0, python=sys.executable, out={str(out)!r},"
        " compare=None, client_seconds=1.0)\n"
        "probe = m.Probe(args); m.watchdog(probe, 1.0)\n"
        "probe.doc['nvml'] = {'calls': [{'key': 'hung', 'fn': 'nvmlDeviceGetCount'}]}\n"
        "time.sleep(60)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 3, done.stderr
    doc = json.loads(out.read_text())
    assert doc["probe"]["timed_out"] is True and doc["probe"]["finished"] is False
    assert doc["nvml"]["calls"][0]["key"] == "hung"


def test_the_fake_nvml_answers_in_kind_as_the_h200_did() -> None:
    """Every NVML call gpudesk makes, on the fakes, against what a real H200 answered (driver
    580.159.04, MIG disabled; idle, two MPS clients, a plain torch load): nothing differs in
    kind. The one difference left is the command a client was started with, which NVML names
    it by: /opt/torch/.venv/bin/python3 there, `python3` (tests/fakes/cuda-python's #!) here."""
    recorded = REPO / "bench/results/h200-2026-11-29/run2/raw_probe.json"
    done = probe("--fakes", "--compare", str(recorded), timeout=120)
    nvml = done.stdout.split("== nvml", 1)[1].split("\n== ", 1)[0]
    differs = [line for line in nvml.splitlines() if line.startswith(("  DIFFERS", "  ONLY-"))]
    assert differs and all("nvmlSystemGetProcessName(client)" in line for line in differs), nvml
