"""What a run cost: tokens per turn, run and session from ``model_usage`` records, and prices.

Tokens are summed exactly as the planner reported them. A cost is shown
only when the service was given a price table (``AGENTLEDGER_PRICES``, a
TOML file of prices per million tokens per model) that prices every model
used; a model without a price is named instead of guessed.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

from agentledger.errors import ValidationError
from agentledger.runtime.records import MODEL_USAGE, UsagePayload, decode_payload, parse_event_key
from agentledger.storage.types import Record

__all__ = ["PRICES_ENV", "Price", "PriceTable", "Tokens", "Usage", "load_prices", "usage_of"]

PRICES_ENV = "AGENTLEDGER_PRICES"
"""The environment variable naming the inspector's price table (a TOML file)."""

_KINDS = ("input", "output", "cache_read", "cache_write")


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


def _price(path: str, model: str, key: str, value: object) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValidationError(
            field=f"{path}: models.{model}.{key}", expected="a price per million tokens", got=value
        )
    try:
        price = Decimal(str(value))
    except InvalidOperation:
        price = Decimal(-1)
    if not price.is_finite() or price < 0:
        raise ValidationError(
            field=f"{path}: models.{model}.{key}", expected="a price of 0 or more", got=value
        )
    return price


def load_prices(path: str | None) -> PriceTable | None:
    """The price table in the TOML file at ``path`` (None when no path is set).

    The file names a ``currency`` (default USD) and, under ``[models."<model>"]``,
    ``input``, ``output``, ``cache_read`` and ``cache_write`` prices per million
    tokens (missing ones are 0).

    Raises:
        ValidationError: the file cannot be read, is not TOML, or holds
            something other than prices (each error names the field).
    """
    if not path:
        return None
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ValidationError(
            field=PRICES_ENV, expected="a readable price table file", got=f"{path}: {e.strerror}"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValidationError(
            field=PRICES_ENV, expected="a TOML file", got=f"{path}: {e}"
        ) from None
    currency = data.get("currency", "USD")
    models = data.get("models", {})
    unknown = sorted(set(data) - {"currency", "models"})
    if not isinstance(currency, str) or not currency or not isinstance(models, dict) or unknown:
        raise ValidationError(
            field=PRICES_ENV,
            expected='currency = "<code>" and [models."<model>"] tables only',
            got=f"{path}: {', '.join(unknown) or 'a malformed currency or models'}",
        )
    table: dict[str, Price] = {}
    for model, prices in models.items():
        if not isinstance(prices, dict) or set(prices) - set(_KINDS):
            raise ValidationError(
                field=f"{path}: models.{model}",
                expected=f"a table of {', '.join(_KINDS)}",
                got=prices,
            )
        table[model] = Price(**{k: _price(path, model, k, v) for k, v in prices.items()})
    return PriceTable(currency=currency, models=table)
