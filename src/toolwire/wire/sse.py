"""Server-sent events: an incremental decoder for the client side and an encoder for the server side.

The decoder follows the rules the OpenAI SDK implements: lines starting with `:` are comments,
several `data:` lines of one event are joined with a newline, and a blank line dispatches the event.
Fields other than `event` and `data` (`id`, `retry`) are read and dropped; no route uses them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SSEDecoder", "SSEEvent", "encode_event"]


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event."""

    data: str
    """The event's data lines, joined with a newline."""
    event: str | None = None
    """The `event:` name, or `None` when the event had none (as every Chat Completions chunk)."""


class SSEDecoder:
    """Turn lines of an event stream into events, one line at a time.

    Feed it the lines of the body without their line endings (a trailing line break is
    tolerated); `feed` returns an event when a blank line completes one.
    """

    __slots__ = ("_data", "_event")

    def __init__(self) -> None:
        self._data: list[str] = []
        self._event: str | None = None

    def feed(self, line: str) -> SSEEvent | None:
        """Take one line; return the event it completes, if any."""
        line = line.rstrip("\r\n")
        if not line:
            return self._dispatch()
        # The hot path: almost every line of a model stream is `data: {...}`.
        if line.startswith("data: "):
            self._data.append(line[6:])
            return None
        if line[0] == ":":
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None

    def flush(self) -> SSEEvent | None:
        """Return the event still pending when the stream ended without its blank line, if any."""
        return self._dispatch()

    def _dispatch(self) -> SSEEvent | None:
        if not self._data:
            # An event with no data is not dispatched (the SSE rules), but it resets the name.
            self._event = None
            return None
        event = SSEEvent(data="\n".join(self._data), event=self._event)
        self._data = []
        self._event = None
        return event


def encode_event(data: str, *, event: str | None = None) -> str:
    """Encode one event for the wire, blank line included.

    Args:
        data: The event's data; each line of it becomes one `data:` line.
        event: An optional event name, sent as an `event:` line first.
    """
    if "\n" in data or "\r" in data:
        body = "".join(f"data: {part}\n" for part in data.splitlines())
    else:
        body = f"data: {data}\n"
    if event is not None:
        return f"event: {event}\n{body}\n"
    return f"{body}\n"
