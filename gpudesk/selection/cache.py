"""The selection cache: one entry per (dataset fingerprint, method, parameters, proxy), holding
the method's ordering of the samples (and the labels, for per-class quotas), what computing it
cost, notes the method reports (e.g. a proxy's accuracy, dedup's near-duplicate count), and
which jobs reused it.

Which cache a process uses is `SelectionCache.used_with`'s rule: its engine's home's; on a
shared station, root's in the station's state folder, each member's in her own gpudesk home.
Layout under that folder (`$GPUDESK_HOME/selection/`)::

    <key>/order.npy       int64 ordering, most wanted first
    <key>/labels.npy      int64 labels (stratified and scored methods: per-class quotas)
    <key>/duplicates.npy  int64 [m, 2] (near-duplicate, the kept sample it duplicates): dedup
    <key>/meta.json       key parts, sha256 of each array file, costs, notes, reuses

Samples are named by their place in the dataset's canonical order (see `apply`).

Entries are written to a temporary folder and renamed into place, so a reader never sees half
of one. Every load checks the arrays against the sha256 in meta.json: a damaged or truncated
entry is moved aside (`<key>.corrupt-<time>`) and reported as missing, so it is recomputed and
never used.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudesk.paths import Home, default_home, private_dir, resolve_home

if TYPE_CHECKING:
    import numpy as np

ARRAYS = ("order", "labels", "duplicates")
META = "meta.json"
INDEX_DIR = "datasets"  # gpudesk.selection.apply's dataset indexes, beside the entries
KEY_VERSION = 2  # 2: scored presets keyed by proxy model and recipe; dedup is real dedup


def cache_key(
    fingerprint: str, method: str, params: dict[str, Any], proxy: str | None = None
) -> str:
    """A stable key for the parts (parameters are compared as canonical JSON)."""
    parts = {
        "v": KEY_VERSION,
        "fingerprint": fingerprint,
        "method": method,
        "params": params,
        "proxy": proxy,
    }
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return f"{method}-{hashlib.sha256(text.encode()).hexdigest()[:24]}"


@dataclass
class Cost:
    """What the pre-pass took when it was computed."""

    wall_s: float = 0.0  # computing the ordering itself
    cpu_s: float = 0.0
    energy_j: float | None = None  # the pre-pass job's, from the engine's telemetry
    job: int | None = None  # the engine job it ran as, when it did
    job_wall_s: float | None = None  # that job from start to end (interpreter start-up included)
    job_cpu_s: float | None = None


@dataclass
class Entry:
    key: str
    fingerprint: str
    method: str
    params: dict[str, Any]
    proxy: str | None
    order: np.ndarray
    labels: np.ndarray | None
    cost: Cost
    created_at: float
    reused_by: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)  # what the method reports; not keyed
    duplicates: np.ndarray | None = None  # dedup: int64 [m, 2] (near-duplicate, kept sample)

    @property
    def training_uses(self) -> int:
        """The jobs that trained on the entry through a shared loader (`loader_use` records)."""
        return sum(LOADER_USE in who for who in self.reused_by)


# How a shared loader names a job it served from an entry ("job 7 via loader digits"); other
# records (`gpudesk select run`'s look-ups) name no loader and trained nothing.
LOADER_USE = " via loader "


def loader_use(who: str, loader: str) -> str:
    """The reuse record of `who` (a job, a process) trained through shared loader `loader`."""
    return f"{who}{LOADER_USE}{loader}"


class CorruptEntry(Exception):
    """An entry whose files do not match their recorded checksums (or do not parse)."""


class SelectionCache:
    def __init__(self, root: Path, private: Path | None = None) -> None:
        self.root = root
        # made 0700 when the cache first writes (used_with): this user's gpudesk home the cache
        # is in, as a personal engine makes its home (paths.private_dir); root's cache on a
        # station itself (its state folder is 0711 on purpose: owners pass through to logs)
        self.private = private
        self.problems: list[str] = []  # corrupt entries found (for the caller to report)

    @classmethod
    def used_with(cls, home: Home) -> SelectionCache:
        """The cache this process uses with `home`'s engine (a station's `home` as
        api.state_home found it): the one rule for every command, job and shared loader.
        A personal engine's home's. On a station, root's (an admin's commands, root's jobs) is
        the station's, in its state folder; a member's is in her own gpudesk home (GPUDESK_HOME,
        else $XDG_STATE_HOME/gpudesk or ~/.local/state/gpudesk): root never reads a folder a
        member controls, and a member never writes root's. Her jobs start from her shell's
        environment, so a pre-pass job finds the folder her `gpudesk` did; a producer the engine
        runs as her has HOME from the password database (a GPUDESK_HOME naming the state folder,
        no home of hers, is passed over). No cache is shared between members: an entry one
        member can change would change the data another's job trains on."""
        if home.is_system and os.geteuid() == 0:  # made private itself, its state folder not made
            return cls(home.selection_dir, home.selection_dir)
        if not home.is_system:
            return cls(home.selection_dir, home.root)
        own = resolve_home()
        mine = Home(default_home() if own == home.root else own)
        return cls(mine.selection_dir, mine.root)

    def make(self) -> Path:
        """The cache's folder, made where missing, its `private` folder made 0700 (and an
        existing one set so): made by a member's first `select run` (an admin's `sudo gpudesk
        select run`) under a umask of 022, it was 0755, and every user listed the selections."""
        if self.private is not None:
            # A station's cache never makes its state folder, the engine's to make: where no
            # engine named it (down), /var/lib/gpudesk made every client on the host take
            # it for a station at the default socket. An error says why.
            station = self.private == self.root
            self.private.mkdir(mode=0o700, parents=not station, exist_ok=True)
            private_dir(self.private, "Make it a folder of yours, not a link.")
        self.root.mkdir(parents=True, exist_ok=True)
        return self.root

    def _dir(self, key: str) -> Path:
        return self.root / key

    # ------------------------------------------------------------------ writing
    def store(self, entry: Entry) -> None:
        staging = Path(tempfile.mkdtemp(prefix=f".{entry.key}.", dir=self.make()))
        try:
            sums = {}
            for name in ARRAYS:
                array = getattr(entry, name)
                if array is None:
                    continue
                data = _npy_bytes(array)
                (staging / f"{name}.npy").write_bytes(data)
                sums[name] = hashlib.sha256(data).hexdigest()
            meta = {
                "key": entry.key,
                "fingerprint": entry.fingerprint,
                "method": entry.method,
                "params": entry.params,
                "proxy": entry.proxy,
                "sha256": sums,
                "cost": asdict(entry.cost),
                "created_at": entry.created_at,
                "reused_by": entry.reused_by,
                "notes": entry.notes,
                "n": len(entry.order),
            }
            (staging / META).write_text(json.dumps(meta, indent=1))
            target = self._dir(entry.key)
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def note_reuse(self, key: str, by: str) -> None:
        """Record that `by` (a job, a run) used the entry without recomputing it."""
        self._update_meta(key, lambda meta: meta.setdefault("reused_by", []).append(by))

    def record_job_cost(
        self, key: str, job: int, wall_s: float | None, cpu_s: float | None, energy_j: float | None
    ) -> None:
        """Add what the engine measured of the job that computed the entry, once: an entry
        whose job's measurement is in keeps it (`gpudesk run --attach` records a run's
        pre-passes again, and only those its `gpudesk run` did not: one that was not
        followed), and an entry that names another job (`note_job`) is not that job's."""

        def update(meta: dict[str, Any]) -> None:
            cost = meta.setdefault("cost", {})
            if cost.get("job") in (None, job) and cost.get("job_wall_s") is None:
                cost.update(job=job, job_wall_s=wall_s, job_cpu_s=cpu_s, energy_j=energy_j)

        self._update_meta(key, update)

    def note_job(self, key: str, job: int) -> None:
        """Name the engine job computing the entry, its measurement to come
        (`record_job_cost`): whoever asks the engine for it later can record it, a run left to
        the engine that no `gpudesk run --attach` followed too (`gpudesk select show`)."""

        def update(meta: dict[str, Any]) -> None:
            cost = meta.setdefault("cost", {})
            if cost.get("job") is None:
                cost["job"] = job

        self._update_meta(key, update)

    def _update_meta(self, key: str, change: Any) -> None:
        """Read, change and rewrite an entry's meta.json, one writer at a time (several jobs'
        loaders may record reuses of one entry at once)."""
        folder = self._dir(key)
        with open(folder / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = folder / META
            meta = json.loads(path.read_text())
            change(meta)
            tmp = folder / f".{META}.{os.getpid()}"
            tmp.write_text(json.dumps(meta, indent=1))
            os.replace(tmp, path)

    # ------------------------------------------------------------------ reading
    def load(self, key: str) -> Entry | None:
        """The entry, or None when there is none, it cannot be read (another user's), or it was
        damaged (then moved aside)."""
        folder = self._dir(key)
        if not folder.is_dir():
            return None
        try:
            return self._read(folder)
        except PermissionError as exc:  # someone else's (a station's is root's): not damaged
            self.problems.append(f"selection cache entry {key} cannot be read: {exc.strerror}")
            return None
        except CorruptEntry as exc:
            aside = folder.with_name(f"{folder.name}.corrupt-{int(time.time())}")
            with contextlib.suppress(OSError):
                os.replace(folder, aside)
            self.problems.append(
                f"selection cache entry {key} is damaged ({exc}); moved to "
                f"{aside.name} and recomputed"
            )
            return None

    def _read(self, folder: Path) -> Entry:
        try:
            meta = json.loads((folder / META).read_text())
            sums = meta["sha256"]
        except PermissionError:
            raise
        # RecursionError: `[[[[…` nested past the stack is as damaged as any other
        except (OSError, ValueError, RecursionError, KeyError, TypeError) as exc:
            raise CorruptEntry(f"{META}: {exc}") from None
        arrays: dict[str, np.ndarray | None] = {"labels": None, "duplicates": None}
        for name in ARRAYS:
            if name not in sums:
                continue
            try:
                data = (folder / f"{name}.npy").read_bytes()
            except PermissionError:
                raise
            except OSError as exc:
                raise CorruptEntry(f"{name}.npy: {exc.strerror or exc}") from None
            if hashlib.sha256(data).hexdigest() != sums[name]:
                raise CorruptEntry(f"{name}.npy does not match its checksum")
            try:
                arrays[name] = _npy_array(data)
            except ValueError as exc:
                raise CorruptEntry(f"{name}.npy: {exc}") from None
        order = arrays.get("order")
        if order is None or len(order) != meta.get("n"):
            raise CorruptEntry("the ordering is missing or has the wrong length")
        pairs = arrays["duplicates"]
        if pairs is not None and (
            pairs.ndim != 2
            or pairs.shape[1] != 2
            or (pairs.size and not 0 <= int(pairs.min()) <= int(pairs.max()) < len(order))
        ):
            raise CorruptEntry("duplicates.npy is not a list of sample pairs")
        cost = meta.get("cost") or {}
        return Entry(
            key=meta["key"],
            fingerprint=meta["fingerprint"],
            method=meta["method"],
            params=meta.get("params") or {},
            proxy=meta.get("proxy"),
            order=order,
            labels=arrays["labels"],
            cost=Cost(**cost),
            created_at=meta["created_at"],
            reused_by=list(meta.get("reused_by") or []),
            notes=dict(meta.get("notes") or {}),
            duplicates=pairs,
        )

    def entries(self) -> list[Entry]:
        if not self.root.is_dir():
            return []
        found = []
        for folder in sorted(self.root.iterdir()):
            if self._is_entry(folder):
                entry = self.load(folder.name)
                if entry is not None:
                    found.append(entry)
        return found

    def clear(self) -> int:
        """Remove every entry (and anything moved aside); returns how many entries went."""
        if not self.root.is_dir():
            return 0
        count = sum(1 for f in self.root.iterdir() if self._is_entry(f))
        shutil.rmtree(self.root)
        return count

    @staticmethod
    def _is_entry(folder: Path) -> bool:
        return (
            folder.is_dir()
            and not folder.name.startswith(".")
            and ".corrupt-" not in folder.name
            and folder.name != INDEX_DIR
        )


# numpy is imported where an entry's arrays are written or read, not with this module: every
# `gpudesk run` imports the cache (its report names the pre-passes' entries and costs), and
# importing numpy is ~0.1 s of CPU, half of such a command's own (docs/benchmarks.md).
def _npy_bytes(array: np.ndarray) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array, dtype=np.int64), allow_pickle=False)
    return buffer.getvalue()


def _npy_array(data: bytes) -> np.ndarray:
    import numpy as np

    return np.load(io.BytesIO(data), allow_pickle=False)
