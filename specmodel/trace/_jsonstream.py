"""Stream the ``traceEvents`` array of a (gzipped) Chrome/Kineto trace with bounded memory.

The file is read in 1 MiB chunks; each event object is decoded by the C JSON scanner
(``JSONDecoder.raw_decode``) straight from the buffer and handed to a callback, so memory is
one chunk + one event, whatever the file size (traces of hundreds of MB per rank are normal).
Top-level keys other than ``traceEvents`` (``distributedInfo``, ``baseTimeNanoseconds``, …) are
small and returned whole, wherever they sit in the file.

Every failure (truncated gzip, invalid JSON, not UTF-8) becomes one :class:`SpecmodelError`
naming the file.
"""

from __future__ import annotations

import gzip
import io
import json
import json.scanner
import re
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast

from specmodel.errors import SpecmodelError
from specmodel.io import os_error, stat_input

CHUNK_CHARS = 1 << 20
#: A decode error this far before the end of the buffer cannot be "the object continues in the
#: next chunk": the JSON is invalid. (Bounds the buffer when a file is broken mid-way.)
_SLACK_CHARS = 4 * CHUNK_CHARS
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_SCAN = json.scanner.make_scanner(_DECODER)  # type: ignore[attr-defined,arg-type]  # the C scanner
#: After an event: whitespace, then ',' (group 1) or ']' (no group), then whitespace.
_AFTER = re.compile(r"[ \t\n\r]*(?:(,)[ \t\n\r]*|\])")


class _Scanner:
    def __init__(self, text: IO[str], path: Path) -> None:
        self.text = text
        self.path = path
        self.buf = ""
        self.pos = 0
        self.consumed = 0  # characters dropped from the front of buf
        self.eof = False

    # -- buffer -----------------------------------------------------------------------------
    def _fill(self) -> None:
        chunk = self.text.read(CHUNK_CHARS)
        if not chunk:
            self.eof = True
        self.consumed += self.pos
        self.buf = self.buf[self.pos:] + chunk
        self.pos = 0

    def _peek(self) -> str:
        """Next non-whitespace character ('' at end of file), not consumed."""
        while True:
            m = _WS.match(self.buf, self.pos)
            assert m is not None
            self.pos = m.end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if self.eof:
                return ""
            self._fill()

    def _expect(self, ch: str, what: str) -> None:
        got = self._peek()
        if got != ch:
            raise self._error(f"expected {ch!r} {what}, found {got!r}" if got else f"file ends before {what}")
        self.pos += 1

    def _error(self, msg: str, at: int | None = None) -> SpecmodelError:
        where = self.consumed + (self.pos if at is None else at)
        if not msg.startswith("file ends"):
            msg = f"{msg} at character {where}"
        return SpecmodelError(f"{self.path}: invalid JSON: {msg}")

    def _value(self) -> Any:
        self._peek()  # raw_decode does not skip leading whitespace
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.pos)
            except RecursionError:
                raise self._error("nested too deeply") from None
            except json.JSONDecodeError as exc:
                if self.eof:
                    if exc.pos >= len(self.buf) - 1 or "Unterminated" in exc.msg:
                        raise self._error("file ends in the middle of a value (truncated?)") from None
                    raise self._error(exc.msg, exc.pos) from None
                if len(self.buf) - exc.pos > _SLACK_CHARS:
                    raise self._error(exc.msg, exc.pos) from None
                self._fill()
                continue
            except ValueError as exc:  # an integer beyond Python's int-string digit limit
                raise self._error(f"bad number ({str(exc)[:80]})") from None
            if end >= len(self.buf) and not self.eof:
                self._fill()  # a number cut at the chunk edge would decode short: retry with more
                continue
            self.pos = end
            return obj

    # -- document -----------------------------------------------------------------------------
    def run(self, on_event: Callable[[Any], None] | None) -> dict[str, Any]:
        """Walk the top-level object; ``on_event=None`` stops at ``traceEvents`` (header only)."""
        header: dict[str, Any] = {}
        saw_events = False
        self._expect("{", "at the start (a trace is a JSON object)")
        if self._peek() == "}":
            self.pos += 1
            return header
        while True:
            key = self._value()
            if not isinstance(key, str):
                raise self._error("expected a key string")
            self._expect(":", f"after key {key!r}")
            if key == "traceEvents":
                saw_events = True
                if on_event is None:
                    header["traceEvents"] = None
                    return header
                self._events(on_event)
            else:
                header[key] = self._value()
            c = self._peek()
            if c == ",":
                self.pos += 1
                continue
            if c == "}":
                self.pos += 1
                break
            raise self._error(f"expected ',' or '}}' after key {key!r}, found {c!r}" if c
                              else "file ends before the closing '}' (truncated?)")
        if not saw_events:
            header.pop("traceEvents", None)
        else:
            header["traceEvents"] = None
        return header

    def _events(self, on_event: Callable[[Any], None]) -> None:
        """The hot loop: one C-scanner call and one regex match per event, no other Python work."""
        self._expect("[", "(traceEvents must be an array)")
        if self._peek() == "]":
            self.pos += 1
            return
        scan = _SCAN
        after = _AFTER.match
        buf, pos = self.buf, self.pos
        while True:
            try:
                obj, end = scan(buf, pos)
            except StopIteration as stop:
                err_pos, msg = int(stop.value), "expected an event object"
                if err_pos < len(buf) and buf[err_pos] == "]":  # trailing comma before ]
                    self.pos = err_pos + 1
                    return
            except json.JSONDecodeError as exc:
                err_pos, msg = exc.pos, exc.msg
            except RecursionError:
                self.pos = pos
                raise self._error("an event nested too deeply") from None
            except ValueError as exc:  # an integer beyond Python's int-string digit limit
                self.pos = pos
                raise self._error(f"bad number in an event ({str(exc)[:80]})") from None
            else:
                m = after(buf, end)
                if m is not None and (m.end() < len(buf) or self.eof):
                    on_event(obj)
                    if m.group(1) is None:  # ']'
                        self.pos = m.end()
                        return
                    pos = m.end()
                    continue
                if m is None:
                    ws = _WS.match(buf, end)
                    assert ws is not None
                    if ws.end() < len(buf) or self.eof:
                        c = buf[ws.end()] if ws.end() < len(buf) else ""
                        self.pos = ws.end()
                        raise self._error(f"expected ',' or ']' in traceEvents, found {c!r}" if c
                                          else "file ends inside traceEvents (truncated?)")
                err_pos, msg = len(buf), ""  # separator not visible yet: read on
            self.pos = pos
            if self.eof:
                if err_pos >= len(buf) - 1 or "Unterminated" in msg:
                    raise self._error("file ends inside traceEvents (truncated?)")
                raise self._error(msg, err_pos)
            if len(buf) - err_pos > _SLACK_CHARS:
                raise self._error(msg, err_pos)
            self._fill()
            buf, pos = self.buf, self.pos


def _open_text(raw: IO[bytes]) -> IO[str]:
    magic = raw.read(2)
    raw.seek(0)
    stream = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb")) if magic == b"\x1f\x8b" else raw
    return io.TextIOWrapper(stream, encoding="utf-8")


def scan_trace(path: str | Path, on_event: Callable[[Any], None] | None) -> dict[str, Any]:
    """Stream ``path`` calling ``on_event(event)`` for each element of ``traceEvents``.

    Returns the other top-level keys; ``"traceEvents"`` is present (as ``None``) iff the file
    had that array. With ``on_event=None`` only the header before ``traceEvents`` is read.
    """
    p = Path(path)
    stat_input(p, "a trace file")
    try:
        with p.open("rb") as raw, _open_text(raw) as text:
            return _Scanner(text, p).run(on_event)
    except gzip.BadGzipFile as exc:
        raise SpecmodelError(f"{p}: not a valid gzip file ({exc})") from None
    except EOFError:
        raise SpecmodelError(f"{p}: truncated gzip file (the compressed stream ends early)") from None
    except zlib.error as exc:
        raise SpecmodelError(f"{p}: corrupt gzip data ({exc})") from None
    except UnicodeDecodeError:
        raise SpecmodelError(f"{p}: not UTF-8 text (is it a trace?)") from None
    except OSError as exc:
        raise os_error(p, exc) from None
