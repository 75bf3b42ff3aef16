"""What a tracking worker says, read from its pipe as it comes: whole lines, each decoded as
untrusted input (`messages.decode_reply`: the worker runs as its owner, who may write to its
pipe herself). Never more than one reply's worth is held: a line longer than MAX_REPLY_BYTES
is dropped to its end, as it comes, and each line not believed is told to `dropped` (the
engine's rate-limited complaint about that worker)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from gpudesk.tracking import messages


class Inbox(msgspec.Struct):
    dropped: Callable[[str], None]  # why a line was not taken
    buffer: bytes = b""  # the start of a line whose end has not come
    discarding: bool = False  # within an overlong line: dropped up to its end

    def take(self, chunk: bytes) -> list[messages.Reply]:
        """The replies the lines completed by `chunk` hold."""
        *lines, rest = (self.buffer + chunk).split(b"\n")
        if self.discarding and lines:  # the end of an overlong line
            lines.pop(0)
            self.discarding = False
        if self.discarding or len(rest) > messages.MAX_REPLY_BYTES:
            if not self.discarding:
                self.dropped("a line longer than any reply")
            self.discarding, rest = True, b""
        self.buffer = rest
        replies: list[messages.Reply] = []
        for line in lines:
            if not line.strip():
                continue
            try:
                replies.append(messages.decode_reply(line))
            except messages.BadMessage as exc:
                self.dropped(f"an unreadable reply: {exc}")
        return replies
