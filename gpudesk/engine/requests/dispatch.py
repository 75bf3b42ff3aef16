"""The op table (op name -> handler, gathered from each group's module) and the door every
request goes through: decoded, dispatched, timed, and any error mapped to its protocol code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gpudesk import diskspace
from gpudesk.core import protocol
from gpudesk.core.identity import Caller
from gpudesk.core.lost_database import request_text
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.wire.requests import REQUEST_ARGS, ArgsError, decode_args
from gpudesk.engine.backends.slurm import SubmitRefused
from gpudesk.engine.offloop import Busy, Later, NextTurn, Pending
from gpudesk.engine.requests.common import EngineParts, Handler
from gpudesk.engine.requests.control import ControlRequests
from gpudesk.engine.requests.editing import EditRequests
from gpudesk.engine.requests.job_actions import JobActionRequests
from gpudesk.engine.requests.listing import ListingRequests
from gpudesk.engine.requests.mig import MigRequests
from gpudesk.engine.requests.model import ModelRequests
from gpudesk.engine.requests.station import StationRequests
from gpudesk.engine.requests.submission import SubmitRequests
from gpudesk.engine.requests.telemetry import TelemetryRequests
from gpudesk.engine.store.schema import UnknownJob
from gpudesk.sqlite_file import is_damage

log = logging.getLogger("gpudesk.engine")


class RequestHandlers:
    """Every op the engine answers, by name; a handler checks what a client sent and hands the
    work to the collaborator that owns it; a bad argument is a ProtocolError naming it."""

    def __init__(self, parts: EngineParts) -> None:
        self.parts = parts
        self.table: dict[str, Handler] = {}
        for group in (
            StationRequests(parts),
            SubmitRequests(parts),
            ListingRequests(parts),
            JobActionRequests(parts),
            TelemetryRequests(parts),
            MigRequests(parts),
            ModelRequests(parts),
            EditRequests(parts),
            ControlRequests(parts),
        ):
            self.table.update(group.ops())
        if set(self.table) != set(REQUEST_ARGS):  # each op's arguments have their type
            raise RuntimeError(f"ops without argument types: {set(self.table) ^ set(REQUEST_ARGS)}")

    def handle(self, raw: bytes, caller: Caller) -> bytes | Pending:
        """One request's reply: its result, or an error with its code and message. `caller` is
        who sent it, as the kernel says (the control socket's peer credentials). A handler
        whose work may wait answers `Later`, one whose work is long `NextTurn`: the reply then
        comes through the `Pending`."""
        request_id = None
        started, op = self.parts.loop.hold(), "invalid"  # how long it held the loop, per op
        try:
            request = protocol.decode_request(raw)
            request_id = request.id
            handler = self.table.get(request.op)
            op = request.op if handler is not None else "unknown"
            if handler is None:
                raise ProtocolError(
                    protocol.UNKNOWN_OP,
                    f"unknown operation {request.op!r}; known: {', '.join(sorted(self.table))}",
                )
            try:
                args = decode_args(REQUEST_ARGS[op], request.args)
            except ArgsError as exc:
                raise ProtocolError(protocol.INVALID_ARGS, str(exc)) from None
            result = handler(args, caller)
            if isinstance(result, (Later, NextTurn)):
                return self._pending(request_id, caller, result, op)
            return protocol.encode_result(request_id, result)  # msgspec, from the struct
        except Exception as exc:
            return self._error_reply(request_id, exc, op)
        finally:
            self.parts.loop.held(started, op, caller.uid)

    def _pending(
        self, request_id: Any, caller: Caller, first: Later[Any] | NextTurn, op: str
    ) -> Pending:
        """The reply of a handler that answered `Later` (work off the loop) or `NextTurn` (more
        on later turns): each step answers the reply or the next step, and each step's time on
        the loop is counted as `op`'s."""

        def start(post: Callable[[bytes], None]) -> None:
            def answer(step: Any, out: Callable[[bytes], None]) -> None:
                if isinstance(step, NextTurn):
                    self.parts.offloop.next_turn(lambda: settle(step.step))
                elif isinstance(step, Later):

                    def done(result: Any, error: BaseException | None) -> None:
                        if isinstance(error, TimeoutError) and step.late is not None:
                            settle(step.late)
                        elif error is not None:
                            post(self._error_reply(request_id, error, op))
                        else:
                            settle(lambda: step.finish(result))

                    try:
                        uid = caller.uid if step.counted else None
                        self.parts.offloop.submit(uid, step.what, step.work, done, step.bound_s)
                    except Busy as exc:
                        out(protocol.encode_error(request_id, protocol.REFUSED, str(exc)))
                else:
                    out(protocol.encode_result(request_id, step))

            def settle(step: Callable[[], Any]) -> None:
                started, replies = self.parts.loop.hold(), list[bytes]()  # counted as op too
                try:
                    answer(step(), replies.append)
                except Exception as exc:
                    replies.append(self._error_reply(request_id, exc, op))
                finally:
                    self.parts.loop.held(started, op, caller.uid)
                for reply in replies:  # posted after: the requests it lets through are not op's
                    post(reply)

            answer(first, post)

        return Pending(start)

    def _error_reply(self, request_id: Any, exc: BaseException, op: str) -> bytes:
        """`_error_reply`, but a store the request could not write because the disk holding
        it is full is said as that (`refused`: nothing was done; retry once there is room)."""
        root = self.parts.home.root
        if not isinstance(exc, ProtocolError) and diskspace.is_full(exc, root):
            log.warning("%s refused: %s", op, exc)
            nothing = "nothing was queued" if op == "submit" else "nothing was changed"
            return protocol.encode_error(
                request_id, protocol.REFUSED, diskspace.request_text(root, nothing)
            )
        return _error_reply(request_id, exc)


def _error_reply(request_id: Any, exc: BaseException) -> bytes:
    """The error reply for what a handler (or its work off the loop) raised."""
    if isinstance(exc, ProtocolError):
        return protocol.encode_error(exc.request_id or request_id, exc.code, exc.message)
    if isinstance(exc, UnknownJob):
        return protocol.encode_error(request_id, protocol.UNKNOWN_JOB, str(exc))
    if isinstance(exc, (TimeoutError, SubmitRefused)):
        return protocol.encode_error(request_id, protocol.REFUSED, str(exc))
    log.error("request failed", exc_info=exc)
    if is_damage(exc):  # a page of the database past its header (gpudesk.core.lost_database)
        return protocol.encode_error(request_id, protocol.INTERNAL, request_text(str(exc)))
    return protocol.encode_error(
        request_id, protocol.INTERNAL, f"the engine failed on this request: {exc}"
    )
