"""Where a run's CPU goes, Python process by Python process (issue 38: the suite's time).

    python bench/process_cpu.py install DIR     # a .pth hook in this venv: each Python
                                                # process started with GPUDESK_PROCESS_CPU=DIR
                                                # in its environment writes a line at exit
    GPUDESK_PROCESS_CPU=DIR python -m pytest ...
    python bench/process_cpu.py report DIR      # processes grouped by what they ran
    python bench/process_cpu.py uninstall

Each line: the process's own CPU (`os.times()`, user + system, children not counted), its
argv, whether it imported torch and torch._dynamo, and the test that started it
(PYTEST_CURRENT_TEST, which subprocesses inherit). A process killed by a signal writes nothing.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from collections import defaultdict
from pathlib import Path

PTH = "gpudesk_process_cpu.pth"
HOOK = (
    "import os, sys; d = os.environ.get('GPUDESK_PROCESS_CPU'); "
    "d and __import__('atexit').register(lambda d=d: open(os.path.join(d, str(os.getpid())), 'w')"
    ".write(__import__('json').dumps({'cpu': sum(os.times()[:2]), 'argv': sys.argv[:6], "
    "'torch': 'torch' in sys.modules, 'dynamo': 'torch._dynamo' in sys.modules, "
    "'test': os.environ.get('PYTEST_CURRENT_TEST', '')})))\n"
)


def kind(argv: list[str]) -> str:
    """What a process was, from its argv."""
    text = " ".join(argv)
    for needle, name in (
        ("engine run", "engine"),
        ("loader serve", "loader producer"),
        ("gpudesk.workloads.", "training job"),
        ("selection", "selection pre-pass"),
        ("xdist", "pytest worker"),
        ("pytest", "pytest"),
        ("nvidia-smi", "nvidia-smi fake"),
        ("mps", "MPS fake"),
    ):
        if needle in text:
            return name
    if "gpudesk" in text:
        return "gpudesk command"
    return "other"


def report(folder: Path) -> None:
    groups: dict[str, list[dict[str, object]]] = defaultdict(list)
    for path in folder.iterdir():
        try:
            row = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        groups[kind(row["argv"])].append(row)
    total = sum(float(r["cpu"]) for rows in groups.values() for r in rows)  # type: ignore[arg-type]
    print(f"{'what':<22}{'processes':>10}{'CPU-s':>9}{'median':>8}{'torch':>7}{'dynamo':>8}")
    for name, rows in sorted(groups.items(), key=lambda kv: -sum(float(r["cpu"]) for r in kv[1])):  # type: ignore[arg-type]
        cpus = sorted(float(r["cpu"]) for r in rows)  # type: ignore[arg-type]
        print(
            f"{name:<22}{len(rows):>10}{sum(cpus):>9.0f}{cpus[len(cpus) // 2]:>8.2f}"
            f"{sum(bool(r['torch']) for r in rows):>7}{sum(bool(r['dynamo']) for r in rows):>8}"
        )
    print(f"{'all':<22}{sum(map(len, groups.values())):>10}{total:>9.0f}")
    dynamo: dict[str, float] = defaultdict(float)
    for rows in groups.values():
        for r in rows:
            if r["dynamo"]:
                dynamo[str(r["test"]).split(" ")[0] or " ".join(r["argv"])] += float(r["cpu"])  # type: ignore[arg-type]
    if dynamo:
        print("\nprocesses that imported torch._dynamo, by test (CPU-s):")
        for test, cpu in sorted(dynamo.items(), key=lambda kv: -kv[1])[:25]:
            print(f"{cpu:8.1f}  {test}")


def main() -> None:
    site = Path(sysconfig.get_paths()["purelib"])
    match sys.argv[1:]:
        case ["install", folder]:
            Path(folder).mkdir(parents=True, exist_ok=True)
            (site / PTH).write_text(HOOK)
            print(f"installed {site / PTH}; run with GPUDESK_PROCESS_CPU={Path(folder).resolve()}")
        case ["uninstall"]:
            (site / PTH).unlink(missing_ok=True)
        case ["report", folder]:
            report(Path(folder))
        case ["-h"] | ["--help"]:
            print(__doc__)
        case _:
            sys.exit(__doc__)


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
