"""What a producer serves: its settings (`ProducerConfig`), the dataset its factory builds and
the data selection it applies to it.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpudesk.core.datasets import SHARES
from gpudesk.loader.protocol import LoaderError, check_name
from gpudesk.loader.staging import DEVICES
from gpudesk.paths import Home
from gpudesk.text import printable_line

log = logging.getLogger("gpudesk.loader")

MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes, the last a NUL (Linux's unix(7))


@dataclass(frozen=True)
class ProducerConfig:
    name: str
    factory: str  # "module:callable", returning a map-style torch Dataset
    factory_kwargs: dict[str, Any] = field(default_factory=dict)
    batch_size: int = 64
    workers: int = 2
    seed: int = 0
    shuffle: bool = True
    slots: int = 16
    idle_exit_s: float | None = None  # stop after this long without a consumer
    managed: bool = False  # started by the engine, which restarts it if it dies
    selection: str | None = None  # a data-selection preset (gpudesk.selection), e.g. el2n-25
    target: str | None = None  # MODULE:FACTORY of the target set a targeted preset ranks by
    target_kwargs: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"  # "cuda": stage each batch once on the GPU for its consumers (staging.py)
    share: str = "private"  # "group": other users' jobs may read it (loader/station_access.py)

    def check(self) -> ProducerConfig:
        check_name(self.name)
        if ":" not in self.factory:
            raise LoaderError(
                f"--dataset '{printable_line(self.factory)}': expected MODULE:FACTORY, e.g. "
                "gpudesk.workloads.images:make_dataset"
            )
        if self.batch_size < 1 or self.workers < 0 or self.slots < 4:
            raise LoaderError(
                "batch size must be at least 1, workers at least 0 and the ring at least 4 slots"
            )
        if self.selection is not None:
            from gpudesk.selection.preset_names import PresetError, parse_preset

            try:
                parse_preset(self.selection)
            except PresetError as exc:
                raise LoaderError(f"--selection: {exc}") from None
        if self.device not in DEVICES:
            raise LoaderError(
                f"--device '{printable_line(self.device)}': expected one of {', '.join(DEVICES)}"
            )
        if self.share not in SHARES:
            raise LoaderError(
                f"--share '{printable_line(self.share)}': expected one of {', '.join(SHARES)}"
            )
        if self.target is not None and ":" not in self.target:
            raise LoaderError(f"--target '{printable_line(self.target)}': expected MODULE:FACTORY")
        return self

    def identity(self) -> dict[str, Any]:
        """What must match for a restarted producer to continue an old one's stream."""
        return {
            "factory": self.factory,
            "factory_kwargs": self.factory_kwargs,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "selection": self.selection,
            "target": self.target,
            "target_kwargs": self.target_kwargs,
        }


def check_socket_paths(name: str, home: Home) -> None:
    """Refuse, before binding, socket paths longer than a Unix socket's: binding would fail
    with a bare errno, and no retry can shorten them."""
    sockets = home.loader_paths(name)[:2]
    longest = max(sockets, key=lambda p: len(os.fsencode(p)))
    length = len(os.fsencode(longest))
    over = length - MAX_SOCKET_PATH
    if over <= 0:
        return
    shorter_name = len(os.fsencode(name)) - over
    rename = f"a dataset (loader) name of at most {shorter_name} characters, or " * (
        shorter_name > 0
    )
    shorter = f"{over} bytes shorter or more"
    # The folder to move: the home, unless gpudesk put the sockets elsewhere (paths.py)
    if home.system_socket is None and home.sockets_inside:
        folder = f"a GPUDESK_HOME {shorter}"
    else:
        folder = f"a socket folder {shorter} than {home.socket_dir}"
    raise LoaderError(
        f"the shared loader {name!r} cannot open its socket {longest}: that path is {length} "
        f"bytes long, and a Unix socket's path holds at most {MAX_SOCKET_PATH}. Use {rename}"
        f"{folder}"
    )


def load_factory(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise LoaderError(f"cannot import the dataset module {module_name!r}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise LoaderError(f"{module_name} has no callable {attr!r} to build the dataset")
    return factory


def open_dataset(config: ProducerConfig) -> tuple[Any, int]:
    """The factory's dataset and its length; a factory that fails, a dataset without a length,
    or an empty one, is refused with a one-line reason."""
    factory = load_factory(config.factory)
    try:
        dataset = factory(**config.factory_kwargs)
    except Exception as exc:  # the user's factory: say which, and what it raised, in one line
        raise LoaderError(
            f"the dataset factory {config.factory} failed: {type(exc).__name__}: {exc}"
        ) from None
    try:
        length = len(dataset)
    except TypeError:
        raise LoaderError(
            f"{config.factory} did not return a map-style dataset (it has no length)"
        ) from None
    if length < 1:
        raise LoaderError(f"{config.factory} returned an empty dataset")
    return dataset, length


def select_data(config: ProducerConfig, home: Home, dataset: Any) -> tuple[Any, Any]:
    """The data selection a producer serves (computed, or reused from the cache), and the
    cache it came from (the producer notes there the jobs that reuse it)."""
    from gpudesk.selection.apply import select
    from gpudesk.selection.cache import SelectionCache
    from gpudesk.selection.preset_names import PresetError

    target = None
    if config.target:
        try:
            target = load_factory(config.target)(**config.target_kwargs)
        except LoaderError:
            raise
        except Exception as exc:  # the user's factory: say which, without a traceback
            raise LoaderError(
                f"the selection target {config.target} failed: {type(exc).__name__}: {exc}"
            ) from None
    cache = SelectionCache.used_with(home)
    try:
        chosen = select(
            dataset,
            config.selection or "full",
            cache,
            seed=config.seed,
            target=target,
            identity={"factory": config.factory, "kwargs": config.factory_kwargs},
        )
    except PresetError as exc:
        raise LoaderError(f"selection {config.selection}: {exc}") from None
    for problem in cache.problems:
        log.warning("loader %s: %s", config.name, problem)
    about = chosen.describe()
    log.info(
        "loader %s: selection %s keeps %d of %d samples (%s, %.2f s)",
        config.name,
        about["preset"],
        about["kept"],
        about["of"],
        "reused from the cache"
        if about["reused"]
        else "no pre-pass"
        if about["key"] is None
        else "pre-pass computed and cached",
        about["select_s"],
    )
    return chosen, cache
