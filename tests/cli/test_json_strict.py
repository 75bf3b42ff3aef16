"""Every `--json` (and `--format json`) output is JSON that a strict reader takes: msgspec, as Go's
and Rust's serde readers would. A byte that is not UTF-8 (in a folder's name, a dataset's path,
a job's argument) reached the output as Python's `"\\udcff"` escape, which stands for no
character: msgspec and serde_json refused the whole document (jq and Go read U+FFFD and lose
the byte). It is spelled out instead, as everything else gpudesk shows spells it: the text
`\\xff`. Output of valid text is what `json.dumps` wrote, byte for byte.
Real processes, a real engine, real files; only the values' spelling is looked at here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
from conftest import EngineHandle

from gpudesk.text import json_text

GPUDESK = [sys.executable, "-m", "gpudesk"]


def gpudesk(*args: str | bytes, home: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "GPUDESK_CONFIG": ""}
    if home is not None:
        env["GPUDESK_HOME"] = str(home)
    return subprocess.run([*GPUDESK, *args], capture_output=True, env=env, timeout=120)


def strict(done: subprocess.CompletedProcess[bytes]) -> object:
    """The command's stdout, read as msgspec reads JSON (it refuses a lone surrogate)."""
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    return msgspec.json.decode(done.stdout)


def test_json_text_writes_what_json_dumps_wrote_for_valid_text() -> None:
    valid = {
        "name": "ça-échoue ✓ \U0001f600",  # a character beyond U+FFFF: a surrogate pair
        "literal": "a\\ud800 typed as text",
        "numbers": [1, 2.5, None, True, 1e300],
        "path": Path("/data/été"),
        "nested": {"b": 1, "a": [{"x": "y"}]},
    }
    for indent in (None, 2):
        assert json_text(valid, indent=indent) == json.dumps(valid, indent=indent, default=str)
    assert json_text(valid, separators=(",", ":"), sort_keys=True) == json.dumps(
        valid, separators=(",", ":"), sort_keys=True, default=str
    )


def test_json_text_spells_a_byte_that_is_not_utf8_and_writes_nan_as_null() -> None:
    bad = os.fsdecode(b"/data/caf\xe9\xff")
    value = {"path": bad, bad: [Path(bad), float("nan"), float("inf")], "ok": "\U0001f600"}
    text = json_text(value, indent=2)
    assert msgspec.json.decode(text) == {
        "path": "/data/caf\\xe9\\xff",
        "/data/caf\\xe9\\xff": ["/data/caf\\xe9\\xff", None, None],
        "ok": "\U0001f600",
    }


def test_engine_status_json_of_a_home_whose_name_is_not_utf8(tmp_path: Path) -> None:
    """Without an engine: `home` and `socket` are this process's own paths."""
    home = Path(os.fsdecode(os.fsencode(tmp_path) + b"/h\xff"))
    status = gpudesk("engine", "status", "--json", home=home)
    assert status.returncode == 3, status.stderr  # not running
    said = strict(status)
    assert said["home"] == f"{tmp_path}/h\\xff"  # type: ignore[index]
    assert said["socket"].startswith(f"{tmp_path}/h\\xff/")  # type: ignore[index]


def test_select_show_json_of_a_dataset_whose_path_is_not_utf8(tmp_path: Path) -> None:
    """A dataset's argument from the command line (its cache folder) with a byte that is not
    UTF-8, kept in the selection cache's entry, shown by `select show --json` and its text."""
    home = tmp_path / "home"
    cache_dir = os.fsencode(tmp_path) + b"/caf\xe9"
    os.mkdir(cache_dir)
    factory = "gpudesk.workloads.images:make_dataset"
    dataset = [factory, "--arg", "size=16", "--arg", "image_px=8", "--arg"]
    ran = gpudesk(
        "select", "run", *dataset, b"cache_dir=" + cache_dir, "--preset", "random-25", "--json",
        home=home,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    key = strict(ran)["key"]  # type: ignore[index]

    shown = gpudesk("select", "show", key, "--json", home=home)
    assert shown.returncode == 0, shown.stderr
    kwargs = {"cache_dir": f"{tmp_path}/caf\\xe9", "image_px": 8, "size": 16}
    assert strict(shown)["positions"]["kwargs"] == kwargs  # type: ignore[index]
    text = gpudesk("select", "show", key, home=home)
    assert f'"cache_dir": "{tmp_path}/caf\\\\xe9"'.encode() in text.stdout, text.stdout  # as JSON
    assert b"\\udc" not in text.stdout


def test_every_json_view_of_a_job_with_bytes_that_are_not_utf8(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """The engine's replies spell such bytes already; these views stay strict JSON with them."""
    folder = os.fsencode(tmp_path) + b"/d\xe9p\xf4t"
    os.mkdir(folder)
    submitted = gpudesk(
        "submit", "--json", "-C", folder, "-e", b"VALUE=caf\xe9", "--",
        "sh", "-c", "printf 'done\\377\\n'", b"arg\xff",
        home=engine.home.root,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job = strict(submitted)["id"]  # type: ignore[index]
    engine.wait_state(job, {"succeeded", "failed"})
    views = {
        "queue": ("queue", "--all", "--json"),
        "show": ("show", str(job), "--json"),
        "logs": ("logs", str(job), "--json"),
        "history": ("history", "--format", "json"),
        "top": ("top", "--once", "--json"),
        "engine": ("engine", "status", "--json"),
    }
    said = {}
    for what, argv in views.items():
        done = gpudesk(*argv, home=engine.home.root)
        assert done.returncode == 0, (what, done.stderr)
        said[what] = strict(done)
    [listed] = [j for j in said["queue"]["jobs"] if j["id"] == job]  # type: ignore[index]
    assert listed["spec"]["command"][-1] == "arg\\xff"
    assert said["show"]["job"]["spec"]["workdir"] == f"{tmp_path}/d\\xe9p\\xf4t"  # type: ignore[index]
    assert [j["id"] for j in said["history"]["jobs"]] == [job]  # type: ignore[index]
    # the job's own output too: the byte spelled \xff, as the README says of every JSON (it
    # was U+FFFD here, which hides that the byte was there)
    assert said["logs"]["output"] == "done\\xff\n"  # type: ignore[index]
