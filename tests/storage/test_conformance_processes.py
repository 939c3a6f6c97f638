"""The suite's process races can fail, and a ``StoreOpener`` refuses what cannot travel."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentledger.errors import ValidationError
from agentledger.storage.conformance import StoreOpener, World
from agentledger.storage.conformance._processes import ProcessRaceConformance
from agentledger.storage.sqlite import SQLiteStore


async def test_writers_on_another_database_fail_the_process_races(tmp_path: Path) -> None:
    """An opener that reaches a different database than the test's: no winner, a failure."""
    async with await SQLiteStore.open(tmp_path / "ledger.db") as store:
        other = str(tmp_path / "other.db")
        elsewhere = StoreOpener("agentledger.storage.sqlite:SQLiteStore.open", other)
        with pytest.raises(AssertionError, match="identical start"):
            await ProcessRaceConformance().test_races_across_processes(
                World(store), store, elsewhere
            )


async def test_an_opener_travels_as_json_and_opens_its_target(tmp_path: Path) -> None:
    opener = StoreOpener(
        "agentledger.storage.sqlite:SQLiteStore.open", str(tmp_path / "x.db"), durability="normal"
    )
    again = StoreOpener.decode(opener.encode())
    assert (again.target, again.args, again.kwargs) == (
        opener.target, opener.args, opener.kwargs,
    )  # fmt: skip
    store = await again.open()
    assert isinstance(store, SQLiteStore)
    await store.close()
    assert repr(opener).startswith("StoreOpener('agentledger.storage.sqlite:SQLiteStore.open'")


@pytest.mark.parametrize("target", ["mystore", "mystore:", ":open", ""])
def test_a_target_without_module_and_attribute_is_refused(target: str) -> None:
    with pytest.raises(ValidationError) as refused:
        StoreOpener(target)
    assert refused.value.field == "target"


def test_arguments_that_are_not_json_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as refused:
        StoreOpener("mystore:MyStore.open", tmp_path)  # a Path, not its str
    assert refused.value.field == "args"
