"""Benchmark: the transcript codec against the standard json module on the same data.

Run as ``.venv/bin/python bench/transcript_codec.py`` (or ``make bench``). It is
not a test: it prints a table of messages/s and MB/s, best and median of five
repetitions, so codec changes can be compared against a known baseline.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from agentledger.transcript import (
    CacheCheckpointPart,
    Citation,
    CitationsPart,
    DocumentPart,
    ImagePart,
    JsonNumber,
    Message,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    decode_messages,
    encode_messages,
)

MESSAGES = 10_000
REPETITIONS = 5
_WORDS = ("the", "ledger", "keeps", "every", "record", "in", "commit", "order", "so", "a", "run")


def _sentence(seed: int, words: int) -> str:
    """Deterministic filler text of about ``words`` words."""
    return " ".join(_WORDS[(seed + i * 7) % len(_WORDS)] for i in range(words))


def _message(i: int) -> Message:
    """One message of a realistic mix, chosen by ``i``; about 500 bytes encoded on average."""
    shape = i % 6
    call_id = f"toolu_{i:08d}"
    if shape == 0:
        return Message(role="user", parts=(TextPart(text=_sentence(i, 70)),))
    if shape == 1:
        return Message(
            role="assistant",
            parts=(
                ThinkingPart(
                    text=_sentence(i, 25), signature="EqQBCkYIBRgCIkBzaWduYXR1cmU=", final=True
                ),
                TextPart(text=_sentence(i, 12)),
                ToolUsePart(
                    id=call_id,
                    name="search_orders",
                    input={
                        "customer_id": i,
                        "limit": 20,
                        "min_total": 12.5,
                        "rate": JsonNumber("0.0725"),
                        "statuses": ["open", "shipped"],
                        "window": {"from": "2025-01-01", "to": "2025-03-31"},
                    },
                ),
            ),
        )
    if shape == 2:
        return Message(
            role="user",
            parts=(
                ToolResultPart(
                    tool_use_id=f"toolu_{i - 1:08d}",
                    content={
                        "orders": [
                            {"id": i * 10 + k, "total": 19.99 + k, "qty": k} for k in range(4)
                        ],
                        "more": False,
                    },
                ),
                TextPart(text=_sentence(i, 10)),
            ),
        )
    if shape == 3:
        return Message(
            role="assistant",
            parts=(
                CitationsPart(
                    text=_sentence(i, 20),
                    citations=(
                        Citation(
                            title="Order policy",
                            source="policy.pdf",
                            location={"page_start": 3, "page_end": 4},
                            source_content=(_sentence(i, 15),),
                        ),
                    ),
                ),
                TextPart(text=_sentence(i, 15)),
            ),
        )
    if shape == 4:
        return Message(
            role="user",
            parts=(
                TextPart(text=_sentence(i, 15)),
                ImagePart(format="png", data=bytes(range(256))),
                CacheCheckpointPart(),
            ),
        )
    return Message(
        role="user",
        parts=(DocumentPart(name=f"notes-{i}", format="txt", text=_sentence(i, 50), cite=True),),
        meta={"provider": "anthropic", "request_id": f"req_{i}"},
    )


def _timed(action: Callable[[], Any]) -> list[float]:
    """Wall-clock seconds of ``action`` for each repetition."""
    seconds = []
    for _ in range(REPETITIONS):
        gc.collect()  # start each repetition from the same heap, outside the timing
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> int:
    """Build the transcript, time both codecs, print the table."""
    messages = [_message(i) for i in range(MESSAGES)]
    encoded = encode_messages(messages)
    plain = json.loads(encoded)  # the same data as dicts (floats, base64 strings)
    plain_encoded = json.dumps(plain, separators=(",", ":"), ensure_ascii=False).encode()
    assert decode_messages(encoded) == messages

    rows = [
        ("agentledger", "encode", _timed(lambda: encode_messages(messages)), len(encoded)),
        ("agentledger", "decode", _timed(lambda: decode_messages(encoded)), len(encoded)),
        (
            "json (dicts)",
            "encode",
            _timed(lambda: json.dumps(plain, separators=(",", ":"), ensure_ascii=False).encode()),
            len(plain_encoded),
        ),
        ("json (dicts)", "decode", _timed(lambda: json.loads(plain_encoded)), len(plain_encoded)),
    ]
    print(
        f"{MESSAGES} messages, {len(encoded) / 1e6:.2f} MB, "
        f"{len(encoded) / MESSAGES:.0f} bytes/message; best and median of {REPETITIONS}; "
        f"Python {sys.version.split()[0]}"
    )
    header = f"{'method':<14}{'op':<8}{'msg/s best':>14}{'msg/s median':>14}"
    header += f"{'MB/s best':>12}{'MB/s median':>13}"
    print(header)
    print("-" * len(header))
    for method, op, seconds, size in rows:
        best, median = min(seconds), statistics.median(seconds)
        print(
            f"{method:<14}{op:<8}{MESSAGES / best:>14,.0f}{MESSAGES / median:>14,.0f}"
            f"{size / best / 1e6:>12.1f}{size / median / 1e6:>13.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
