"""The station's own slots as a `Backend` (gpudesk.engine.backends.base): jobs queued here, placed
by the scheduler and run as attempts (engine/attempts.py, runner.py, scheduler.py)."""

from gpudesk.engine.backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]
