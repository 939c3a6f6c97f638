"""The contract suite every ``Store`` backend must pass (pytest-native, importable).

Subclass :class:`StoreConformance` in a test module and give it an async
``store_factory`` fixture that yields a callable opening a handle on one
database (call it twice, get two handles on the same data)::

    import pytest
    import pytest_asyncio
    from agentledger.storage.conformance import StoreConformance, StoreOpener

    class TestMyStore(StoreConformance):
        @pytest_asyncio.fixture
        async def store_factory(self, tmp_path):
            handles = []
            async def open_store():
                handles.append(await MyStore.open(tmp_path / "db"))
                return handles[-1]
            yield open_store
            for handle in handles:
                await handle.close()

        @pytest.fixture
        def store_opener(self, tmp_path):
            return StoreOpener("mystore:MyStore.open", str(tmp_path / "db"))

Tests namespace every id they use, so one database may serve many tests.
``store_opener`` lets spawned processes open the same database for the
process races; a store that lives in one process sets ``process_races = False``.
The suite marks its own async tests, so it runs in any pytest-asyncio mode.
"""

try:
    import hypothesis  # noqa: F401
    import pytest  # noqa: F401
    import pytest_asyncio  # noqa: F401
except ImportError as e:
    from agentledger._extras import needs_extra

    raise needs_extra("agentledger.storage.conformance", "conformance", e) from e

from agentledger.storage.conformance._base import ConformanceBase, StoreFactory
from agentledger.storage.conformance._batches import BatchConformance
from agentledger.storage.conformance._cancellation import CancellationConformance
from agentledger.storage.conformance._carried import CarriedRecordsConformance
from agentledger.storage.conformance._children import ChildrenConformance
from agentledger.storage.conformance._closing import ClosingConformance
from agentledger.storage.conformance._continuation import ContinuationConformance
from agentledger.storage.conformance._derived import CascadeConformance, DerivedConformance
from agentledger.storage.conformance._import import (
    ImportConformance,
    ImportMessageConformance,
    ImportReferenceConformance,
)
from agentledger.storage.conformance._messages import MessageConformance
from agentledger.storage.conformance._one_shot import OneShotConformance
from agentledger.storage.conformance._opener import StoreOpener
from agentledger.storage.conformance._paging import PagingConformance
from agentledger.storage.conformance._payloads import PayloadConformance
from agentledger.storage.conformance._processes import ProcessRaceConformance
from agentledger.storage.conformance._purge import PurgeConformance
from agentledger.storage.conformance._races import RaceConformance
from agentledger.storage.conformance._records import RecordConformance
from agentledger.storage.conformance._references import HistoryReferenceConformance
from agentledger.storage.conformance._search import SearchConformance
from agentledger.storage.conformance._session_listing import SessionListingConformance
from agentledger.storage.conformance._sessions import SessionConformance
from agentledger.storage.conformance._start_retries import StartRetryConformance
from agentledger.storage.conformance._starts import StartConformance
from agentledger.storage.conformance._stateful import StatefulConformance
from agentledger.storage.conformance._suspension import SuspensionConformance
from agentledger.storage.conformance._terminal import TerminalConformance
from agentledger.storage.conformance._tool_results import ToolResultConformance
from agentledger.storage.conformance._usage import UsageConformance
from agentledger.storage.conformance._windows import TranscriptWindowConformance
from agentledger.storage.conformance._world import World, dump_store

__all__ = ["StoreConformance", "StoreFactory", "StoreOpener", "World", "dump_store"]


class StoreConformance(
    SessionConformance,
    SessionListingConformance,
    StartConformance,
    ChildrenConformance,
    OneShotConformance,
    ContinuationConformance,
    HistoryReferenceConformance,
    TranscriptWindowConformance,
    MessageConformance,
    PurgeConformance,
    UsageConformance,
    DerivedConformance,
    CascadeConformance,
    ImportConformance,
    ImportMessageConformance,
    ImportReferenceConformance,
    RecordConformance,
    BatchConformance,
    CarriedRecordsConformance,
    StartRetryConformance,
    CancellationConformance,
    SuspensionConformance,
    TerminalConformance,
    ToolResultConformance,
    PagingConformance,
    SearchConformance,
    PayloadConformance,
    RaceConformance,
    ProcessRaceConformance,
    StatefulConformance,
    ClosingConformance,
    ConformanceBase,
):
    """Every capability of the store contract, as one class to subclass."""
