"""How gpudesk starts its own code in a process of its own (the engine, the shared loaders'
producers, calibration probes): `python -m MODULE` from `/`, with `-P` where Python has it.

`python -m` puts the current directory first on the import path, so a `queue.py`, `psutil.py`
or `zmq.py` in the directory of whoever happened to start the engine would be imported into the
daemon and run there (as root, for root's engine). Starting in `/` (writable by root alone)
leaves nothing to shadow on any Python; `-P` (3.11+) drops that path entry altogether. `-I` is
not used: it would also drop PYTHONPATH and the user's site-packages, where a `pip install
--user` gpudesk, or a dataset factory's module, lives.
"""

from __future__ import annotations

import sys

SAFE_CWD = "/"  # the working directory of gpudesk's own processes: nothing there to import


def module_argv(module: str, *args: str) -> list[str]:
    """The command that runs `module` with this interpreter, the caller's directory kept off
    its import path. Start it with `cwd=SAFE_CWD`."""
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *safe_path, "-m", module, *args]
