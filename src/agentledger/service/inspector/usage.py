"""The inspector's price table: ``AGENTLEDGER_PRICES``, a TOML file of prices per million
tokens per model (the token counts and costs are :mod:`agentledger.views.usage`'s)."""

from __future__ import annotations

import tomllib
from decimal import Decimal, InvalidOperation
from pathlib import Path

from agentledger.errors import ValidationError
from agentledger.views.usage import Price, PriceTable

__all__ = ["PRICES_ENV", "load_prices"]

PRICES_ENV = "AGENTLEDGER_PRICES"
"""The environment variable naming the inspector's price table (a TOML file)."""

_KINDS = ("input", "output", "cache_read", "cache_write")


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
