"""The contract suite every ``Store`` backend must pass (pytest-native, importable).

Subclass :class:`StoreConformance` in a test module and give it an async
``store_factory`` fixture that yields a callable opening a handle on one
database (call it twice, get two handles on the same data)::

    import pytest
    from agentledger.storage.conformance import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        async def store_factory(self, tmp_path):
            handles = []
            async def open_store():
                handles.append(await MyStore.open(tmp_path / "db"))
                return handles[-1]
            yield open_store
            for handle in handles:
                await handle.close()
"""

from agentledger.storage.conformance._base import ConformanceBase, StoreFactory
from agentledger.storage.conformance._world import World, dump_store

__all__ = ["ConformanceBase", "StoreConformance", "StoreFactory", "World", "dump_store"]


class StoreConformance(ConformanceBase):
    """Every capability of the store contract, as one class to subclass."""
