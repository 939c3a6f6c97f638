"""The SQLite backend: the embedded default store, one file shared by processes.

``SQLiteStore`` implements ``Store`` and ``SessionAdmin`` with the standard
library's ``sqlite3`` (WAL mode, one ``BEGIN IMMEDIATE`` transaction per
lifecycle method); ``default_path`` is where the CLI and demo keep it;
``check_invariants`` audits a database file after a crash.
"""

from agentledger.storage.sqlite.check import check_invariants
from agentledger.storage.sqlite.connection import Durability
from agentledger.storage.sqlite.schema import LATEST_VERSION, MIGRATIONS, Migration
from agentledger.storage.sqlite.store import SQLiteStore, default_path

__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "Durability",
    "Migration",
    "SQLiteStore",
    "check_invariants",
    "default_path",
]
