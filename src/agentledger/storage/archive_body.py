"""[A1] An archive's body inflated and decoded as a stream, a page at a time.

The body is ``zlib(msgpack(session image))``: a map of the session, its runs,
its records and its checkpoints (and, from format version 2, its submitted
messages). It is inflated a page (64 KiB) at a time and
each entry is decoded as soon as its bytes are in, then its bytes are dropped:
what a body costs in memory is the image it really holds plus a page, never
what it inflates to. A body that stops fitting its manifest is refused at
once: one that is not a session image at its first bytes (a run of zeros),
a list longer or shorter than the manifest counts (before any entry of it is
built), a length that would pass the bound, or more bytes than the bound
allows as they come.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import msgspec

from agentledger.errors import CorruptArchiveError
from agentledger.storage.types import Checkpoint, Record, RunMeta, Session, SessionMessage
from agentledger.storage.validation import (
    MAX_ID_LENGTH,
    MAX_LABEL_KEY_LENGTH,
    MAX_LABEL_VALUE_LENGTH,
    MAX_LABELS,
)

__all__ = [
    "CHECKPOINT_BOUND",
    "ID_BOUND",
    "LABELS_BOUND",
    "MESSAGE_BOUND",
    "PAGE",
    "RECORD_BOUND",
    "RUN_BOUND",
    "ArchiveBody",
    "inflate_body",
]

PAGE = 64 * 1024
"""Bytes inflated at a time."""

T = TypeVar("T")

# Per msgpack first byte from 0xc0: (bytes skipped, bytes of a length, what the length
# counts: "" nothing, "bytes" bytes to skip, "items" objects, "pairs" key-value pairs).
_HEADS: dict[int, tuple[int, int, str]] = {
    0xC0: (0, 0, ""),  # nil
    0xC2: (0, 0, ""),  # false
    0xC3: (0, 0, ""),  # true
    0xC4: (0, 1, "bytes"),  # bin 8/16/32
    0xC5: (0, 2, "bytes"),
    0xC6: (0, 4, "bytes"),
    0xC7: (1, 1, "bytes"),  # ext 8/16/32: a type byte, then the data
    0xC8: (1, 2, "bytes"),
    0xC9: (1, 4, "bytes"),
    0xCA: (4, 0, ""),  # float 32/64
    0xCB: (8, 0, ""),
    0xCC: (1, 0, ""),  # uint 8..64
    0xCD: (2, 0, ""),
    0xCE: (4, 0, ""),
    0xCF: (8, 0, ""),
    0xD0: (1, 0, ""),  # int 8..64
    0xD1: (2, 0, ""),
    0xD2: (4, 0, ""),
    0xD3: (8, 0, ""),
    0xD4: (2, 0, ""),  # fixext 1/2/4/8/16 (a timestamp is one)
    0xD5: (3, 0, ""),
    0xD6: (5, 0, ""),
    0xD7: (9, 0, ""),
    0xD8: (17, 0, ""),
    0xD9: (0, 1, "bytes"),  # str 8/16/32
    0xDA: (0, 2, "bytes"),
    0xDB: (0, 4, "bytes"),
    0xDC: (0, 2, "items"),  # array 16/32
    0xDD: (0, 4, "items"),
    0xDE: (0, 2, "pairs"),  # map 16/32
    0xDF: (0, 4, "pairs"),
}
ID_BOUND = 4 * MAX_ID_LENGTH + 8  # msgpack's str header
LABELS_BOUND = MAX_LABELS * 4 * (MAX_LABEL_KEY_LENGTH + MAX_LABEL_VALUE_LENGTH + 16)
RECORD_BOUND = 8 * ID_BOUND + 256  # seven ids and the type, field names, a timestamp
CHECKPOINT_BOUND = 2 * ID_BOUND + 64
RUN_BOUND = 8 * ID_BOUND + LABELS_BOUND + 512  # ids, labels, status, times (or the session)
MESSAGE_BOUND = 8 * ID_BOUND + LABELS_BOUND + 512  # seven ids, labels, fate, policy, a time
"""The largest a record (without its payload), a checkpoint (without its data), a run or
the session, or a message (without its JSON) can be in msgpack: every id at its longest
in 4-byte UTF-8 characters, every label set at its limits."""
_FIELDS = ("session", "runs", "records", "checkpoints")
_MESSAGES = "messages"
"""The field a body of format version 2 or later holds too (the session's messages)."""
_MAX_OBJECTS = 2 * MAX_LABELS + 64
"""The most msgpack objects one entry holds (a run: its fields and its labels at their
limit): an entry that holds more is not one, and is refused before it is read on."""
_KEY = msgspec.msgpack.Decoder(str)
_SESSION = msgspec.msgpack.Decoder(Session)
_RUN = msgspec.msgpack.Decoder(RunMeta)
_RECORD = msgspec.msgpack.Decoder(Record)
_CHECKPOINT = msgspec.msgpack.Decoder(Checkpoint)
_MESSAGE = msgspec.msgpack.Decoder(SessionMessage)


class ArchiveBody(NamedTuple):
    """A body's session image, every entry decoded and counted against the manifest."""

    session: Session
    runs: list[RunMeta]
    records: list[Record]
    checkpoints: dict[str, Checkpoint]
    messages: list[SessionMessage]


class _Inflating:
    """The body inflated a page at a time and read forward; bytes read are dropped at
    each entry's start, so it holds one entry and a page at most."""

    def __init__(
        self,
        compressed: bytes,
        bound: int,
        corrupt: Callable[[str], CorruptArchiveError],
        past: CorruptArchiveError,
    ) -> None:
        self._inflater = zlib.decompressobj()
        self._pending: bytes | memoryview = memoryview(compressed)
        self._bound = bound
        self._corrupt = corrupt
        self._past = past  # the refusal of a body that passes the bound
        self.buf = bytearray()
        self.pos = 0
        self.total = 0  # bytes inflated so far

    def release(self) -> None:
        """Drop the bytes read so far: the next entry starts at the buffer's start."""
        if self.pos:
            del self.buf[: self.pos]
            self.pos = 0

    def _more(self) -> bool:
        """Inflate one more page into the buffer; False once the stream has ended."""
        while not self._inflater.eof:
            room = self._bound + 1 - self.total
            step = self._inflater.decompress(self._pending, min(PAGE, room))
            self._pending = self._inflater.unconsumed_tail
            self.total += len(step)
            if self.total > self._bound:
                raise self._past
            if step:
                self.buf += step
                return True
            if not self._pending:
                raise self._corrupt("unreadable contents: a cut or padded stream")
        return False

    def need(self, n: int) -> None:
        """Make ``n`` unread bytes available, refusing a length that would pass the bound."""
        short = n - (len(self.buf) - self.pos)
        if short <= 0:
            return
        if self.total + short > self._bound:
            raise self._past
        while len(self.buf) - self.pos < n:
            if not self._more():
                raise self._corrupt("unreadable contents: a cut or padded stream")

    def byte(self) -> int:
        self.need(1)
        self.pos += 1
        return self.buf[self.pos - 1]

    def uint(self, size: int) -> int:
        self.need(size)
        value = int.from_bytes(self.buf[self.pos : self.pos + size], "big")
        self.pos += size
        return value

    def too_big(self, end: int, cap: int) -> CorruptArchiveError:
        """The refusal of an entry that would end at ``end``, past ``cap``: the bound's
        if reading it would pass the bound too, else one naming the entry's cap."""
        if self.total + end - len(self.buf) > self._bound:
            return self._past
        return self._corrupt(f"unreadable contents: an entry of more than {cap} bytes")

    def finish(self) -> None:
        """The image is whole: nothing may follow it, and the stream must end here."""
        if len(self.buf) > self.pos or self._more() or self._inflater.unused_data:
            raise self._corrupt("unreadable contents: a cut or padded stream")
        if not self._inflater.eof:
            raise self._corrupt("unreadable contents: a cut or padded stream")


def _entry(src: _Inflating, decoder: msgspec.msgpack.Decoder[T], cap: int) -> T:
    """The next msgpack object, decoded from the buffer in place (no copy of its bytes).

    An object that would pass ``cap`` bytes is refused before it is inflated.
    """
    end = _object(src, cap)
    with memoryview(src.buf) as whole, whole[:end] as view:
        return decoder.decode(view)


def _object(src: _Inflating, cap: int) -> int:
    """Scan the next msgpack object, whole (its nested objects included); its end.

    Each header is read in Python, so an object of more than :data:`_MAX_OBJECTS`
    objects is refused as it comes: what a hostile body costs in time is bounded
    per entry, like its memory. (The buffer is read through locals; ``need``
    only grows it, in place, while an entry is read.)
    """
    src.release()
    buf = src.buf
    pos = 0
    remaining = 1
    seen = 0
    while remaining:
        remaining -= 1
        seen += 1
        if seen > _MAX_OBJECTS:
            raise msgspec.DecodeError(f"an entry of more than {_MAX_OBJECTS} values")
        if pos >= len(buf):
            src.pos = pos
            src.need(1)
        head = buf[pos]
        pos += 1
        if head <= 0x7F or head >= 0xE0:  # fixint
            continue
        if head <= 0x8F:  # fixmap
            remaining += 2 * (head & 0x0F)
            continue
        if head <= 0x9F:  # fixarray
            remaining += head & 0x0F
            continue
        if head <= 0xBF:  # fixstr
            pos += head & 0x1F
        else:
            fixed, size, counts = _HEADS.get(head, (-1, 0, ""))
            if fixed < 0:
                raise msgspec.DecodeError(f"invalid msgpack byte 0x{head:02x}")
            length = 0
            if size:
                if pos + size > len(buf):
                    src.pos = pos
                    src.need(size)
                length = int.from_bytes(buf[pos : pos + size], "big")
                pos += size
            if counts == "items":
                remaining += length
                continue
            if counts == "pairs":
                remaining += 2 * length
                continue
            pos += fixed + length
        if pos > cap:
            raise src.too_big(pos, cap)
        if pos > len(buf):  # skipped past what is inflated: inflate up to it
            src.pos = len(buf)
            src.need(pos - len(buf))
    src.pos = pos
    return pos


def _count(src: _Inflating, pairs: bool) -> int:
    """The length of the next array (or map, ``pairs``) from its header."""
    src.release()
    head = src.byte()
    small, small_end = (0x80, 0x8F) if pairs else (0x90, 0x9F)
    if small <= head <= small_end:
        return head & 0x0F
    sizes = {0xDE: 2, 0xDF: 4} if pairs else {0xDC: 2, 0xDD: 4}
    if head not in sizes:
        raise msgspec.DecodeError(f"expected a {'map' if pairs else 'list'}, got 0x{head:02x}")
    return src.uint(sizes[head])


def _entries(
    src: _Inflating,
    decoder: msgspec.msgpack.Decoder[T],
    claimed: int,
    mismatch: CorruptArchiveError,
    cap: int,
) -> list[T]:
    """A list of entries, its length checked against the manifest before any is built."""
    count = _count(src, pairs=False)
    if count != claimed:
        raise mismatch
    return [_entry(src, decoder, cap) for _ in range(count)]


def inflate_body(
    compressed: bytes,
    claims: Any,
    bound: int,
    corrupt: Callable[[str], CorruptArchiveError],
    past: Callable[[int], CorruptArchiveError],
) -> ArchiveBody:
    """The session image of a compressed body, inflated and decoded a page at a time.

    ``claims`` is the manifest (its ``runs``, ``records``, ``checkpoints`` and
    ``messages`` counts, and its ``format_version``: a body of version 1 has no
    messages, one of version 2 has them, maybe none); ``bound`` the most bytes
    the body may inflate to; ``past(bound)`` the refusal of a body that passes it.

    Raises:
        CorruptArchiveError: from ``corrupt`` or ``past``.
        msgspec.DecodeError: bytes that are not the session image.
        zlib.error: bytes that are not a zlib stream.
    """
    bound = min(max(bound, 0), sys.maxsize - 1)  # counts are a claim: negative or huge ones too
    src = _Inflating(compressed, bound, corrupt, past(bound))

    def mismatch(name: str) -> CorruptArchiveError:
        return corrupt(f"contents do not match the manifest ({name})")

    wanted = (*_FIELDS, _MESSAGES) if claims.format_version >= 2 else _FIELDS
    fields: dict[str, Any] = {}
    for _ in range(_count(src, pairs=True)):
        key = _entry(src, _KEY, ID_BOUND)
        if key not in wanted or key in fields:
            raise msgspec.DecodeError(f"the session image has field {key!r} again or unknown")
        if key == "session":
            fields[key] = _entry(src, _SESSION, RUN_BOUND)
        elif key == "runs":
            fields[key] = _entries(src, _RUN, claims.runs, mismatch("runs"), RUN_BOUND)
        elif key == "records":
            fields[key] = _entries(src, _RECORD, claims.records, mismatch("records"), bound)
        elif key == _MESSAGES:
            fields[key] = _entries(src, _MESSAGE, claims.messages, mismatch("messages"), bound)
        else:
            count = _count(src, pairs=True)
            if count != claims.checkpoints:
                raise mismatch("checkpoints")
            checkpoints: dict[str, Checkpoint] = {}
            for _ in range(count):
                run_id = _entry(src, _KEY, ID_BOUND)
                checkpoints[run_id] = _entry(src, _CHECKPOINT, bound)
            if len(checkpoints) != count:
                raise mismatch("checkpoints")
            fields[key] = checkpoints
    missing = [name for name in wanted if name not in fields]
    if missing:
        raise msgspec.DecodeError(f"the session image lacks {', '.join(missing)}")
    src.release()
    src.finish()
    fields.setdefault(_MESSAGES, [])
    return ArchiveBody(**fields)
