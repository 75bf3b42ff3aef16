"""Where gpudesk keeps its state: one directory per `GPUDESK_HOME`.

Layout::

    $GPUDESK_HOME/
      gpudesk.db          SQLite store (WAL)
      engine.log          the daemon's own log
      engine.lock         single-instance lock (flock), holds the daemon's pid
      run/                0700: the daemon's ipc:// sockets
      jobs/<id>/<n>/      one folder per attempt: output.log, wrapper.json, exit.json
      run/loaders/        each shared loader's sockets and its NAME.json (pid, settings)
      selection/          data-selection orderings, one folder per (dataset, method, params)
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

# sun_path in sockaddr_un is 108 bytes on Linux; zmq refuses longer ipc:// paths.
_MAX_SOCKET_PATH = 100


class HomeError(RuntimeError):
    """This home cannot be used by this user; the message is one paragraph saying what to do."""


def _user(uid: int) -> str:
    """A user's name, or their uid when the system has no name for it."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def check_owner(root: Path) -> None:
    """Raise HomeError when `root` exists and belongs to another user. A home is one user's:
    sharing another's would fail on their files, or (as root) leave files they cannot use."""
    try:
        owner = root.stat().st_uid
    except FileNotFoundError:
        return
    except PermissionError as exc:
        raise HomeError(
            f"cannot use the gpudesk home {root}: {exc.strerror}. Set GPUDESK_HOME to a folder "
            "of your own."
        ) from None
    me = os.geteuid()
    if owner != me:
        default = default_home()
        elsewhere = f" (the default is {default})" if default != root else ""
        raise HomeError(
            f"the gpudesk home {root} belongs to {_user(owner)} (uid {owner}), and you are "
            f"{_user(me)} (uid {me}): each user keeps a home of their own, and an engine here "
            "would mix your jobs with theirs or fail on their files. Set GPUDESK_HOME to a "
            f"folder of your own{elsewhere}, or, if this home is yours, take it back: "
            f"`sudo chown -R {_user(me)} {root}`."
        )


def default_home() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state) / "gpudesk"


def resolve_home(explicit: str | os.PathLike[str] | None = None) -> Path:
    raw = explicit if explicit is not None else os.environ.get("GPUDESK_HOME")
    home = Path(raw).expanduser() if raw else default_home()
    return home.absolute()


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


@dataclass(frozen=True)
class Home:
    root: Path

    @classmethod
    def from_env(cls, explicit: str | os.PathLike[str] | None = None) -> Home:
        return cls(resolve_home(explicit))

    @property
    def db(self) -> Path:
        return self.root / "gpudesk.db"

    @property
    def engine_log(self) -> Path:
        return self.root / "engine.log"

    @property
    def lock(self) -> Path:
        return self.root / "engine.lock"

    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    def attempt_dir(self, job_id: int, attempt: int) -> Path:
        return self.jobs_dir / str(job_id) / str(attempt)

    @property
    def socket_dir(self) -> Path:
        """A 0700 folder for the sockets; outside the home when the home's path is too long."""
        inside = self.root / "run"
        if len(str(inside / "control.sock")) <= _MAX_SOCKET_PATH:
            return inside
        digest = hashlib.sha1(str(self.root).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"gpudesk-{os.getuid()}" / digest

    @property
    def control_endpoint(self) -> str:
        return f"ipc://{self.socket_dir / 'control.sock'}"

    @property
    def events_endpoint(self) -> str:
        return f"ipc://{self.socket_dir / 'events.sock'}"

    @property
    def selection_dir(self) -> Path:
        """The data-selection cache (gpudesk.selection.cache)."""
        return self.root / "selection"

    @property
    def loader_dir(self) -> Path:
        return self.socket_dir / "loaders"

    def loader_paths(self, name: str) -> tuple[Path, Path, Path]:
        """A shared loader's control socket, descriptor socket and info file."""
        folder = self.loader_dir
        return folder / f"{name}.ctl", folder / f"{name}.fd", folder / f"{name}.json"

    def ensure(self) -> Home:
        """Create the home and its private folders (idempotent); HomeError when it is another
        user's."""
        check_owner(self.root)
        _private_dir(self.root)
        if self.socket_dir.parent != self.root:
            _private_dir(self.socket_dir.parent)
        _private_dir(self.socket_dir)
        self.jobs_dir.mkdir(exist_ok=True)
        return self
