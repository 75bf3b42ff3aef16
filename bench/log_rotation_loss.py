"""Bytes a log rotation loses without a word, with a job writing as fast as it can.

    python bench/log_rotation_loss.py [--folder /dev/shm] [--rotations 200] [--cap-mib 1]
                                      [--runs 2] [--most-gib 4] [--json]

A writer appends 256-KiB blocks of 64-byte lines to FOLDER/output.log through an O_APPEND
descriptor (as a job's stdout is), on the rotating process's own CPU (so it is often preempted
inside a write, as on a busy station), while this process rotates the log (gpudesk.joblog.rotate,
keeping two parts) --rotations times at a cap of --cap-mib. Lost without a word: what the
writer says it wrote minus the stream's end (every byte read, or in a gap the rotation record
announces). Each run is measured twice over: the way this file system allows (cut in place,
else a hole punched, else copy-truncate), and with holes treated as unsupported (copy-truncate
where nothing can be cut: what a tmpfs or NFS log got before holes were punched).

Bounded: the writer stops at --most-gib (and its file size limit, RLIMIT_FSIZE, is just past
it: a punched log's size grows by all that is written, its disk use does not); the rotating
loop stops when the writer does. A run's folder is removed after it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's gpudesk

from gpudesk import joblog  # noqa: E402
from gpudesk.joblog import collapse  # noqa: E402

MIB = 1 << 20
WRITER = textwrap.dedent("""\
    import os, select, sys
    fd, most = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND), int(sys.argv[2])
    block, written = (b"x" * 63 + b"\\n") * 4096, 0
    while written < most and not select.select([0], [], [], 0)[0]:
        written += os.write(fd, block)
    print(written)
""")


def one_run(
    folder: Path, rotations: int, cap: int, most: int, punch: bool
) -> dict[str, int | float]:
    work = Path(tempfile.mkdtemp(prefix="rotation-loss-", dir=folder))
    try:
        log = work / "output.log"
        log.touch()
        if not punch:  # as before holes were punched: remembered as unsupported here
            collapse._unpunchable_devices.add(os.stat(log).st_dev)

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (most + MIB, most + MIB))

        cpus = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(cpus)})
        began = time.monotonic()
        try:
            writer = subprocess.Popen(
                [sys.executable, "-c", WRITER, str(log), str(most)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                preexec_fn=limit,
            )
            done = 0
            try:
                while done < rotations and writer.poll() is None:
                    done += joblog.rotate(log, cap, 2)
            finally:
                out, _ = writer.communicate(b"", timeout=60)
        finally:
            os.sched_setaffinity(0, cpus)
            collapse._unpunchable_devices.clear()
        seconds = time.monotonic() - began
        written = int(out)
        end = joblog.stream_end(log)
        st = os.stat(log)
        return {
            "punch": punch,
            "rotations": done,
            "seconds": round(seconds, 2),
            "written": written,
            "lost": written - end,
            "data_from": joblog.read_rotation(log).data_from,
            "log_size": st.st_size,
            "log_disk": st.st_blocks * 512,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, default=Path("/dev/shm"))
    parser.add_argument("--rotations", type=int, default=200)
    parser.add_argument("--cap-mib", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--most-gib", type=float, default=4.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cap, most = int(args.cap_mib * MIB), int(args.most_gib * (1 << 30))
    results = [
        one_run(args.folder, args.rotations, cap, most, punch)
        for punch in (False, True)
        for _ in range(args.runs)
    ]
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(f"{args.folder}: {args.rotations} rotations at a cap of {args.cap_mib:g} MiB")
    print("rotation            rotations  seconds   written MB   lost MB   log size MB  disk MB")
    for r in results:
        way = "as it allows" if r["punch"] else "copy-truncate"
        print(
            f"{way:<18} {r['rotations']:>10} {r['seconds']:>8} {r['written'] / 1e6:>12,.0f}"
            f" {r['lost'] / 1e6:>9,.1f} {r['log_size'] / 1e6:>12,.0f}"
            f" {r['log_disk'] / 1e6:>8,.1f}"
        )
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
