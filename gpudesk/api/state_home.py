"""The folder a station's files are in, as its engine has it.

A system engine keeps its state in the folder root started it with (`--state-dir`, by default
/var/lib/gpudesk). A client finds that engine by its socket (GPUDESK_SOCKET, or the station's
default one), and the socket says nothing of the folder: a client that took the default read
another folder than the engine's on a station started with `--state-dir /srv/gpudesk` (the
selection cache). So a client asks the engine: its `ping` names its state folder (`home`), and
what a client reads or writes beside the engine is taken from there. A personal home is its own
engine's state folder. Where the engine does not answer (stopped, an engine from before `home`,
a user outside the station's group), the folder the client found is kept: the default one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from gpudesk.api.errors import EngineError
from gpudesk.paths import Home

if TYPE_CHECKING:
    from gpudesk.api.client import Client

# How long a command waits for the station's engine to name its folder (a ping: milliseconds)
ASK_TIMEOUT_S = 5.0


def state_home(home: Home, client: Client | None = None) -> Home:
    """`home`, a system engine's with the state folder its engine names; `client`: one of that
    engine, asked through it, else a connection is made for the question. The answer is the
    engine's own: the client checked that the socket's folder is root's before asking."""
    if not home.is_system:
        return home
    try:
        if client is not None:
            named = client.ping().home
        else:
            from gpudesk.api.client import Client

            with Client.attach(home, timeout=ASK_TIMEOUT_S) as asked:
                named = asked.ping().home
    except EngineError:
        return home
    if named is None or not os.path.isabs(named):
        return home
    return Home.system(home.control_socket, Path(named))
