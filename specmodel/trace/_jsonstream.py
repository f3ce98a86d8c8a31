"""Stream the ``traceEvents`` array of a (gzipped) Chrome/Kineto trace with bounded memory.

The file is read in 1 MiB chunks (decoded as strict UTF-8, no newline translation); each event
object is decoded by the C JSON scanner (``JSONDecoder.raw_decode``) straight from the buffer and
handed to a callback, so memory is one chunk + one event, whatever the file size (traces of
hundreds of MB per rank are normal).
Top-level keys other than ``traceEvents`` (``distributedInfo``, ``baseTimeNanoseconds``, …) are
small and returned whole, wherever they sit in the file.

Every failure (truncated gzip, invalid JSON, not UTF-8) becomes one :class:`SpecmodelError`
naming the file.

**Pre-filter** (``keep=``, what ``specmodel ingest`` uses). Most of a trace is events the analysis
drops (``aten::`` ops, flow arrows, runtime calls); decoding them was most of ingest's time. With a
``keep`` predicate the array is cut at the last ``},`` of the buffer and that whole run of events
is handed to msgspec's C decoder at once, which validates all of it and materialises only the
fields the predicate reads (:data:`EVENT_KEYS`, ``args`` only the predicate's ``args_keys``). Only
events the predicate keeps are delivered (the rest are counted): to the consumer's own
``on_structs`` as the decoded structs when ``on_event`` is its own (no dict per event), else as
dicts. Why this is exact: the cut is proven, not guessed — ``[`` + run + ``]`` is valid JSON
only if the cut lies between two top-level events (a cut inside a string or a nested value
leaves it unterminated). Anything msgspec refuses or reads differently from the standard
library (a wrong cut, NaN/Infinity, a number out of range, a lone surrogate, invalid JSON) sends
that run down the full-decode path below, which gives the old results and the old errors. The
one difference: a field nobody reads is validated but never converted, so a 5,000-digit integer
there is no longer refused (it costs nothing). ``keep=None`` is the reference (full-decode) path.

**Compiled pre-filter.** Where the consumer has one (``Prefilter.compiled``: the Collector's is
specmodel/trace/_cscan.c), it reads each buffer itself, event by event, as undecoded bytes, and
stops at any event it does not read exactly as the standard library would (``C_SLOW``, a
non-ASCII byte among them): the rest of that buffer is decoded, that one event goes down the
full-decode path, and the scan goes on after it (bytes again from the next fill). What the scan
consumes is ASCII, so positions in messages stay character offsets. The msgspec runs above are
then only its fallback: a buffer holding characters beyond U+00FF, or a box where the C part is
not built.

One module on purpose: the scanner's buffer loop is ingest's hot path, and its three decode paths
(compiled, msgspec, full) must deliver the same events, so they sit side by side.
"""

from __future__ import annotations

import codecs
import gc
import gzip
import json
import json.scanner
import re
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import IO, Any, Protocol, cast

from specmodel.errors import SpecmodelError
from specmodel.io import os_error, stat_input
from specmodel.limits import MAX_COMPILED_EVENT_CHARS

try:  # ISA-L's gzip reader: inflate and CRC in C, ~2x GzipFile (a dependency; zlib is the fallback)
    from isal import igzip, isal_zlib
except ImportError:  # pragma: no cover
    igzip = isal_zlib = None  # type: ignore[assignment]
#: what a corrupt deflate stream raises, by either reader
_INFLATE_ERRORS: tuple[type[BaseException], ...] = (
    zlib.error, *([cast(type[BaseException], isal_zlib.error)] if isal_zlib is not None else []))

CHUNK_CHARS = 1 << 20
#: a header read's first chunk (doubling up to CHUNK_CHARS): ``read_meta`` needs a few KB, not 1 MB
_HEADER_CHUNK_CHARS = 1 << 14
#: A decode error this far before the end of the buffer cannot be "the object continues in the
#: next chunk": the JSON is invalid. (Bounds the buffer when a file is broken mid-way.)
_SLACK_CHARS = 4 * CHUNK_CHARS
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_SCAN = json.scanner.make_scanner(_DECODER)  # type: ignore[attr-defined,arg-type]  # the C scanner
#: After an event: whitespace, then ',' (group 1) or ']' (no group), then whitespace.
_AFTER = re.compile(r"[ \t\n\r]*(?:(,)[ \t\n\r]*|\])")

#: The top-level event fields a ``keep`` predicate and its consumer may read.
EVENT_KEYS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args")
_TOP_KEYS = EVENT_KEYS[:-1]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __reduce__(self) -> str:
        return "MISSING"  # (one object, pickled by name)


#: A key absent from an event (a pre-filter tells it from a JSON null).
MISSING: Any = _Missing()
#: A pre-filter's decision for one (ph, cat, name): decode the event (True), count it only (False),
#: decode it only if its ``args`` has this key (a str), or HOST_OP: hand its (pid, tid, ts, dur,
#: name, cat) to ``host_ops_of`` unless its args have ``Collective name`` (then decode it).
HOST_OP: Any = object()
#: A decision that reads as True (decode it) here; a compiled pre-filter records such an event
#: itself, as the consumer would: a collective if the classifier says so, else a host op
#: (``gloo:all_reduce`` on a CPU trace).
COLLECTIVE_OR_HOST_OP: Any = object()
_COLL_KEY = "Collective name"


class Prefilter(Protocol):
    """What decides which events are decoded (:class:`specmodel.trace.attribution.Collector`)."""

    #: the ``args`` keys the consumer reads: a kept event's ``args`` holds only these
    args_keys: tuple[str, ...]
    #: (ph, cat, name) -> decision, filled by ``decide``; the owner clears it when its rules change
    decisions: dict[tuple[Any, Any, Any], Any]
    #: the one ``ph`` an event may have to be kept: ``decide`` is False for every other
    only_ph: str

    def decide(self, ph: Any, cat: Any, name: Any) -> Any: ...

    def host_ops_of(self, ops: Sequence[Any]) -> bool:
        """HOST_OP events, as decoded structs (their pid, tid, ts, dur; MISSING when absent);
        False (nothing recorded) sends the run to the full decode."""
        ...

    def on_event(self, e: Any) -> None: ...

    def compiled(self) -> Callable[[str | bytes, int], tuple[int, int, list[dict[str, Any]], int]] | None:
        """The compiled pre-filter bound to this consumer, or None (see :data:`C_MORE`)."""
        ...

    def on_structs(self, events: Sequence[Any], as_dict: Callable[[Any], dict[str, Any]]) -> None:
        """The kept events of one run, as decoded structs (fields :data:`EVENT_KEYS`, ``args`` a
        struct whose attributes are :func:`arg_field` of each key, MISSING when absent): exactly
        what ``on_event(as_dict(ev))`` for each, in order, would do (used when ``on_event`` is
        the consumer's own). ``as_dict.args(ev.args)`` is that dict's ``args`` alone."""
        ...


def arg_field(key: str) -> str:
    """The attribute of a decoded ``args`` struct holding ``key`` (``"Collective name"`` ->
    ``collective_name``)."""
    return re.sub(r"\W+", "_", key).strip("_").lower()


#: What a compiled pre-filter's ``scan(buf, pos)`` says (specmodel/trace/_cscan.c): the element at
#: ``pos`` is not complete in the buffer (read more), the array ended (``pos`` past its ``]``), the
#: element at ``pos`` must be read by the reference decoder (one event), the buffer holds
#: characters beyond U+00FF (the msgspec path reads it). It also returns the kept events it did
#: not consume itself (dicts for ``on_event``, in order) and how many it counted.
C_MORE, C_END, C_SLOW, C_WIDE = 0, 1, 2, 3

#: Below this many characters left in the buffer, read more before cutting a run.
_MIN_RUN_CHARS = CHUNK_CHARS // 2
#: A refused run is halved down to this length before its events are read one by one.
_MIN_RETRY_CHARS = 1 << 15

@lru_cache(maxsize=1)
def _msgspec() -> Any:
    """msgspec, imported on first use (None where it is missing: every event is then decoded).
    Only the pre-filter's fallback needs it: where the compiled one runs, ingest never imports
    it (~10 ms of every start: it imports datetime, uuid, decimal, typing_extensions)."""
    try:
        import msgspec
    except ImportError:  # pragma: no cover - a dependency
        return None
    return msgspec


@lru_cache(maxsize=8)
def _run_decoder(args_keys: tuple[str, ...]) -> tuple[Any, tuple[tuple[str, str], ...], tuple[type[BaseException], ...]]:
    """A decoder of ``[event, ...]`` that builds only :data:`EVENT_KEYS` and, of ``args``, only
    ``args_keys`` (every other key is validated and skipped, in C; an absent one is
    :data:`MISSING`). Ids must be scalars (a list or object sends the run to the full decode,
    which names it); ``args`` an object or null. Values are those json.loads gives (msgspec
    refuses the inputs where they differ: the errors returned, on which the run goes to the full
    decode)."""
    msgspec = _msgspec()
    fields = tuple((arg_field(k), k) for k in args_keys)
    if len({f for f, _ in fields}) != len(fields):
        raise ValueError(f"args keys clash as attributes: {args_keys}")
    scalar = str | int | float | bool | None
    # gc=False: a struct holds scalars (and the args struct) only, so it cannot be in a cycle;
    # untracked, the collector never walks the hundreds of thousands a run decodes
    args_t = msgspec.defstruct("_Args", [(f, Any, msgspec.field(default=MISSING, name=k)) for f, k in fields],
                               gc=False)
    event_t = msgspec.defstruct("_Event", [
        *((k, scalar, MISSING) for k in ("ph", "cat", "name", "pid", "tid")),
        ("ts", Any, MISSING), ("dur", Any, MISSING),
        ("args", args_t | None, MISSING)], gc=False)  # type: ignore[operator]
    errors = (msgspec.DecodeError, ValueError, RecursionError, OverflowError, MemoryError)
    return msgspec.json.Decoder(list[event_t]), fields, errors  # type: ignore[valid-type]


@lru_cache(maxsize=8)
def _as_dict(fields: tuple[tuple[str, str], ...]) -> Callable[[Any], dict[str, Any]]:
    """A decoded event -> the dict ``json.loads`` gives, less the fields nobody reads."""
    from msgspec.structs import asdict

    miss = MISSING

    def args(a: Any) -> dict[str, Any] | None:
        """Of a decoded ``args`` (None or MISSING: None): the dict as_dict gives (its ``args``)."""
        if a is None or a is miss:
            return None
        return {k: v for f, k in fields if (v := getattr(a, f)) is not miss}

    def as_dict(ev: Any) -> dict[str, Any]:
        e = asdict(ev)
        for k in _TOP_KEYS:
            if e[k] is miss:
                del e[k]
        a = e.pop("args")
        if a is not miss:
            e["args"] = args(a)
        return e

    as_dict.args = args  # type: ignore[attr-defined]  # (the args alone, without the event's dict)
    return as_dict


def _own(on_event: Callable[[Any], None], keep: Prefilter) -> bool:
    """Is ``on_event`` the pre-filter's own ``on_event``? Only then may its fast paths (structs,
    the compiled scan) stand in for calling it on each event."""
    return getattr(on_event, "__self__", None) is keep \
        and getattr(on_event, "__func__", None) is getattr(type(keep), "on_event", None)


def _bad_number(exc: ValueError) -> str:
    """What json's ValueError says, without the digit count it names: that count is how many
    digits happened to be in the buffer (it varies with where a chunk ends)."""
    msg = str(exc)
    if "integer string conversion" in msg:
        return f"an integer beyond Python's {sys.get_int_max_str_digits()}-digit limit"
    return msg[:80]


class _Scanner:
    """The reader's state: the text read so far and not consumed (``buf`` from ``pos``), or, while
    the compiled pre-filter reads events, those bytes undecoded (``raw``; :meth:`_to_bytes`)."""

    def __init__(self, stream: IO[bytes], path: Path) -> None:
        self.stream = stream
        self.path = path
        self.dec = codecs.getincrementaldecoder("utf-8")()  # (strict: invalid UTF-8 raises)
        self.buf = ""
        self.pos = 0
        self.raw: bytes | None = None  # bytes mode: the buffer, undecoded (buf is then empty)
        self.consumed = 0  # characters dropped from the front of the buffer
        self.eof = False
        self.n_skipped = 0  # events the pre-filter counted without decoding
        self.chunk = CHUNK_CHARS  # (smaller while only the header is read: run())

    # -- buffer -----------------------------------------------------------------------------
    def _read(self) -> bytes:
        size = min(self.chunk, CHUNK_CHARS)
        self.chunk = size * 2
        data = self.stream.read(size)
        if not data:
            self.eof = True
        return data

    def _fill(self) -> None:
        assert self.raw is None
        data = self._read()
        chunk = self.dec.decode(data, final=not data)
        self.consumed += self.pos
        self.buf = self.buf[self.pos:] + chunk
        self.pos = 0

    def _to_bytes(self) -> None:
        """Bytes mode (the compiled scan reads undecoded bytes: no decoding of what it skips).
        What it consumes there is ASCII (it stops at any other byte: C_SLOW), so a byte offset
        is a character offset; the text not consumed is encoded back (at most a chunk, once a fill)."""
        pending, _ = self.dec.getstate()  # (a character cut at the end of the last read)
        self.dec.reset()
        self.consumed += self.pos
        self.raw = self.buf[self.pos:].encode("utf-8") + pending
        self.buf, self.pos = "", 0

    def _fill_bytes(self) -> None:
        """Read more in bytes mode (switching to it first if the reference left text)."""
        if self.raw is None:
            self._to_bytes()
        assert self.raw is not None
        self.consumed += self.pos
        self.raw = self.raw[self.pos:] + self._read()
        self.pos = 0

    def _to_text(self) -> None:
        """Back to text: the bytes not consumed, decoded (the reference and msgspec read text)."""
        assert self.raw is not None
        raw, self.raw = self.raw, None
        self.consumed += self.pos
        self.buf = self.dec.decode(memoryview(raw)[self.pos:], final=self.eof)
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
                raise self._error(f"bad number ({_bad_number(exc)})") from None
            if end >= len(self.buf) and not self.eof:
                self._fill()  # a number cut at the chunk edge would decode short: retry with more
                continue
            self.pos = end
            return obj

    # -- document -----------------------------------------------------------------------------
    def run(self, on_event: Callable[[Any], None] | None, keep: Prefilter | None = None) -> dict[str, Any]:
        """Walk the top-level object; ``on_event=None`` stops at ``traceEvents`` (header only)."""
        header: dict[str, Any] = {}
        saw_events = False
        if on_event is None:
            self.chunk = _HEADER_CHUNK_CHARS
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
                self._events(on_event, keep)
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

    def _run(self, on_event: Callable[[Any], None], keep: Prefilter, cut: int) -> bool:
        """Decode the events in ``buf[pos:cut + 1]`` (``cut``: a ``}`` followed by ``,``) as one run;
        deliver the kept ones. False (nothing consumed) when msgspec refuses the run."""
        buf, pos = self.buf, self.pos
        decoder, fields, refused = _run_decoder(keep.args_keys)
        try:
            run = decoder.decode("[" + buf[pos:cut + 1] + "]")
        except refused:
            return False
        miss = MISSING
        host = HOST_OP
        coll_or_host = COLLECTIVE_OR_HOST_OP
        rules = keep.decisions
        decide = keep.decide
        only_ph = keep.only_ph
        attr = dict((k, f) for f, k in fields)
        coll = attr.get(_COLL_KEY)
        kept = []
        hosts = []
        for ev in run:
            ph = ev.ph
            if ph != only_ph:  # (flow arrows, instants, metadata: no decision to look up)
                continue
            d = rules.get((ph, ev.cat, ev.name))
            if d is None:
                d = decide(ph, ev.cat, ev.name)
            if d is True or d is coll_or_host:
                pass
            elif d is False:
                continue
            elif d is host:
                a = ev.args
                if a is miss or a is None or coll is None or getattr(a, coll) is miss:
                    hosts.append(ev)
                    continue
            else:  # decode only if args has key d
                a = ev.args
                if a is miss or a is None or getattr(a, attr[d]) is miss:
                    continue
            kept.append(ev)
        if hosts and not keep.host_ops_of(hosts):
            return False
        self.n_skipped += len(run) - len(kept)
        as_dict = _as_dict(fields)
        if _own(on_event, keep):
            keep.on_structs(kept, as_dict)  # the consumer's own handler: no dict per event
        else:
            for ev in kept:
                on_event(as_dict(ev))
        self.pos = cut + 2  # past the ','
        return True

    def _events(self, on_event: Callable[[Any], None], keep: Prefilter | None = None) -> None:
        """The hot loop: one C-scanner call and one regex match per event, no other Python work;
        with ``keep``, whole runs of events per msgspec call instead (see the module docstring)."""
        self._expect("[", "(traceEvents must be an array)")
        if self._peek() == "]":
            self.pos += 1
            return
        scan = _SCAN
        after = _AFTER.match
        fast = keep is not None
        compiled = keep.compiled() if keep is not None and _own(on_event, keep) and hasattr(keep, "compiled") \
            else None
        slow_until = -1  # absolute position: a run refused there is read event by event up to it
        buf, pos = self.buf, self.pos
        while True:
            if compiled is not None and self.consumed + pos > slow_until:
                if not self.eof and len(buf if self.raw is None else self.raw) - pos < _MIN_RUN_CHARS:
                    self.pos = pos
                    self._fill_bytes()
                    pos = self.pos
                data = buf if self.raw is None else self.raw
                status, pos, items, counted = compiled(data, pos)
                self.n_skipped += counted
                for e in items:
                    on_event(e)
                if status == C_END:
                    self.pos = pos
                    if self.raw is not None:
                        self._to_text()
                    return
                if status == C_MORE and not self.eof and len(data) - pos < MAX_COMPILED_EVENT_CHARS:
                    self.pos = pos
                    self._fill_bytes()
                    pos = self.pos
                    continue
                # C_SLOW, or an event unfinished at the end of the file or longer than the bound:
                # the reference reads the element at pos (below), as text; C_WIDE: the msgspec path, next
                if self.raw is not None:
                    self.pos = pos
                    self._to_text()
                    buf, pos = self.buf, self.pos
            if fast and self.consumed + pos > slow_until and (compiled is None or status == C_WIDE) \
                    and _msgspec() is not None:
                if not self.eof and len(buf) - pos < _MIN_RUN_CHARS:
                    self.pos = pos
                    self._fill()
                    buf, pos = self.buf, self.pos
                cut = buf.rfind("},", pos)
                if cut >= 0:
                    self.pos = pos
                    ok = self._run(on_event, keep, cut)  # type: ignore[arg-type]
                    # refused: the cut may lie past the array's end (a trailing key holding an
                    # object: `], "otherData": {"a": {...}, ...}`) or the run hold one odd event.
                    # Halve it while it is long: the events before are read fast all the same.
                    while not ok and cut - pos > _MIN_RETRY_CHARS:
                        shorter = buf.rfind("},", pos, pos + (cut - pos) // 2)
                        if shorter < 0:
                            break
                        cut = shorter
                        ok = self._run(on_event, keep, cut)  # type: ignore[arg-type]
                    if ok:
                        self._peek()
                        buf, pos = self.buf, self.pos
                        continue
                    slow_until = self.consumed + cut  # (the shortest run refused)
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
                raise self._error(f"bad number in an event ({_bad_number(exc)})") from None
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


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a trace streams: it allocates millions of short-lived
    objects (freed by reference counting, none in a cycle) and a growing list of kept tuples,
    which every full collection would walk again. Restored (and left to run) afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _open_bytes(raw: IO[bytes]) -> IO[bytes]:
    """The file's JSON bytes: ``raw`` itself, or its gzip stream inflated."""
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        opener = igzip.IGzipFile if igzip is not None else gzip.GzipFile
        return cast(IO[bytes], opener(fileobj=raw, mode="rb"))
    return raw


def scan_trace(path: str | Path, on_event: Callable[[Any], None] | None, keep: Prefilter | None = None,
               on_skipped: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Stream ``path`` calling ``on_event(event)`` for each element of ``traceEvents``.

    Returns the other top-level keys; ``"traceEvents"`` is present (as ``None``) iff the file
    had that array. With ``on_event=None`` only the header before ``traceEvents`` is read.
    With ``keep``, only the events it decides to keep are delivered, holding only
    :data:`EVENT_KEYS`; ``on_skipped(n)`` is told how many were not.
    """
    p = Path(path)
    stat_input(p, "a trace file")
    try:
        with gc_paused(), p.open("rb") as raw, _open_bytes(raw) as stream:
            sc = _Scanner(stream, p)
            header = sc.run(on_event, keep)
            if on_skipped is not None:
                on_skipped(sc.n_skipped)
            return header
    except gzip.BadGzipFile as exc:
        raise SpecmodelError(f"{p}: not a valid gzip file ({exc})") from None
    except EOFError:
        raise SpecmodelError(f"{p}: truncated gzip file (the compressed stream ends early)") from None
    except _INFLATE_ERRORS as exc:
        raise SpecmodelError(f"{p}: corrupt gzip data ({exc})") from None
    except UnicodeDecodeError:
        raise SpecmodelError(f"{p}: not UTF-8 text (is it a trace?)") from None
    except OSError as exc:
        raise os_error(p, exc) from None
