"""A stand-in for the engine, for test_loader_orphan.py: it starts a producer as the engine does
(gpudesk/engine/services/loaders.py `_launch`: `gpudesk loader serve NAME ... --managed` as its
own child, in a session of its own, its own pid in GPUDESK_LOADER_ENGINE_PID, the output to a
log), writes the producer's pid to PIDFILE, then waits to be killed; with --exit it exits at
once instead, as an engine stopped right after starting a producer.

    python engine_stand_in.py PIDFILE LOG [--exit] -- ARGV...
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from gpudesk.loader.orphan import ENV_ENGINE_PID


def main(argv: list[str]) -> int:
    split = argv.index("--")
    (pidfile, log, *options), command = argv[:split], argv[split + 1 :]
    with open(log, "ab") as out:
        producer = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            env={**os.environ, ENV_ENGINE_PID: str(os.getpid())},
        )
    with open(f"{pidfile}.tmp", "w") as f:
        f.write(str(producer.pid))
    os.replace(f"{pidfile}.tmp", pidfile)  # whole when it shows
    if "--exit" in options:
        os._exit(0)  # as the engine's process ends: no wait for its child
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
