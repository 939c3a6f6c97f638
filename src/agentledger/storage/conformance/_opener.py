"""How a spawned process opens a handle on the test's database: :class:`StoreOpener`.

Kept free of pytest so the racing processes import only this, the package and
the backend named by the opener.
"""

from __future__ import annotations

import importlib
import inspect
import json
from typing import Any

from agentledger.errors import ValidationError

__all__ = ["StoreOpener"]


class StoreOpener:
    """An importable ``"module:attribute"`` and JSON arguments that open a store.

    The attribute may be dotted (``"agentledger.storage.sqlite:SQLiteStore.open"``);
    calling it with the arguments must return the store, or an awaitable of it.
    It travels to other processes as JSON, so a spawned process imports the
    module and opens its own handle on the same database.
    """

    __slots__ = ("args", "kwargs", "target")

    def __init__(self, target: str, /, *args: Any, **kwargs: Any) -> None:
        module, sep, attribute = target.partition(":")
        if not (module and sep and attribute):
            raise ValidationError(
                field="target", expected="'module:attribute', e.g. 'mystore:MyStore.open'",
                got=target,
            )  # fmt: skip
        try:
            json.dumps([args, kwargs])
        except TypeError as e:
            raise ValidationError(
                field="args", expected="JSON values (str, int, float, bool, None, list, dict)",
                got=str(e),
            ) from e  # fmt: skip
        self.target = target
        self.args = args
        self.kwargs = kwargs

    def __repr__(self) -> str:
        params = [repr(self.target), *map(repr, self.args)]
        params += [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"StoreOpener({', '.join(params)})"

    def encode(self) -> str:
        """This opener as one JSON text (a command-line argument)."""
        return json.dumps({"target": self.target, "args": self.args, "kwargs": self.kwargs})

    @classmethod
    def decode(cls, text: str) -> StoreOpener:
        """The opener :meth:`encode` wrote."""
        data = json.loads(text)
        return cls(data["target"], *data["args"], **data["kwargs"])

    async def open(self) -> Any:
        """Import the target, call it with the arguments and await the result if needed."""
        module_name, _, attribute = self.target.partition(":")
        found: Any = importlib.import_module(module_name)
        for name in attribute.split("."):
            found = getattr(found, name)
        store = found(*self.args, **self.kwargs)
        if inspect.isawaitable(store):
            store = await store
        return store
