"""What runs cost: tokens per turn, run and model from ``model_usage`` records, and prices.

Tokens are summed exactly as the planner reported them; a compaction's
summariser counts in the turn it compacted. A cost is given only for a price
table that prices every model used; a model without a price is named instead
of guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from agentledger.runtime.records import MODEL_USAGE, UsagePayload, decode_payload, parse_event_key
from agentledger.storage.types import Record

__all__ = ["Price", "PriceTable", "Tokens", "Usage", "usage_of"]


@dataclass
class Tokens:
    """Token counts of one or more model calls."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    calls: int = 0

    def add(self, other: Tokens) -> None:
        """Add ``other``'s counts to these."""
        self.input += other.input
        self.output += other.output
        self.cache_read += other.cache_read
        self.cache_write += other.cache_write
        self.calls += other.calls

    @property
    def total(self) -> int:
        """Every token counted, cache reads and writes included."""
        return self.input + self.output + self.cache_read + self.cache_write


@dataclass(frozen=True)
class Price:
    """Prices per million tokens of one model."""

    input: Decimal = Decimal(0)
    output: Decimal = Decimal(0)
    cache_read: Decimal = Decimal(0)
    cache_write: Decimal = Decimal(0)

    def of(self, tokens: Tokens) -> Decimal:
        """What ``tokens`` cost at these prices."""
        total = (
            self.input * tokens.input
            + self.output * tokens.output
            + self.cache_read * tokens.cache_read
            + self.cache_write * tokens.cache_write
        )
        return total / Decimal(1_000_000)


@dataclass(frozen=True)
class PriceTable:
    """Prices per model, in one currency."""

    currency: str = "USD"
    models: Mapping[str, Price] = field(default_factory=dict)


@dataclass
class Usage:
    """Tokens by model and by turn (``run_id``, turn number), with their sums."""

    by_model: dict[str, Tokens] = field(default_factory=dict)
    by_turn: dict[tuple[str, int], Tokens] = field(default_factory=dict)
    by_run: dict[str, Tokens] = field(default_factory=dict)
    total: Tokens = field(default_factory=Tokens)

    def add(self, record: Record) -> None:
        """Count one ``model_usage`` record (others are ignored); a compaction's summariser
        counts in the turn it compacted.

        Raises:
            CorruptRecordError: the record's payload is not a usage payload.
        """
        if record.type != MODEL_USAGE:
            return
        got = decode_payload(record, UsagePayload)
        tokens = Tokens(
            got.input_tokens, got.output_tokens, got.cache_read_tokens, got.cache_write_tokens, 1
        )
        key = (record.run_id, parse_event_key(record.event_key).turn)
        for into in (
            self.by_model.setdefault(got.model, Tokens()),
            self.by_turn.setdefault(key, Tokens()),
            self.by_run.setdefault(record.run_id, Tokens()),
            self.total,
        ):
            into.add(tokens)

    def cost(self, prices: PriceTable | None) -> tuple[Decimal | None, list[str]]:
        """The total cost and the models without a price (cost None if any, or no table)."""
        if prices is None or not self.by_model:
            return None, []
        missing = sorted(m for m in self.by_model if m not in prices.models)
        if missing:
            return None, missing
        return sum((prices.models[m].of(t) for m, t in self.by_model.items()), Decimal(0)), []


def usage_of(records: Iterable[Record]) -> Usage:
    """The token usage the ``model_usage`` records among ``records`` report."""
    usage = Usage()
    for record in records:
        usage.add(record)
    return usage
