"""The runtime store: sessions, runs, checkpoints and immutable ordered records.

``Store`` is what workers call; ``SessionAdmin`` is what hosts call. Every
backend shares the decisions in :mod:`agentledger.storage.lifecycle`, so the
contract is written once; :mod:`agentledger.storage.conformance` proves a
backend keeps it.
"""

from agentledger.storage import payloads
from agentledger.storage.accounting import LabelUsage, UsageTotals
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.derivation import CopiedFrom, DerivedCopy
from agentledger.storage.memory import MemoryStore
from agentledger.storage.protocol import SessionAdmin, Store
from agentledger.storage.search import SearchHit, SearchPage
from agentledger.storage.types import (
    AppendResult,
    BusyPolicy,
    Checkpoint,
    ChildRunStart,
    MessageFate,
    MessageSubmission,
    OneShotChildRunStart,
    OneShotRunStart,
    Page,
    PurgeReceipt,
    Record,
    RepairOutcome,
    RepairResult,
    RootRunStart,
    RunCancellation,
    RunMeta,
    RunStart,
    RunStatus,
    RunSuspension,
    RunTerminal,
    Session,
    SessionMessage,
    SessionPage,
    SessionStatus,
    StartOutcome,
    StartResult,
    TurnAppend,
)

__all__ = [
    "AppendResult",
    "BusyPolicy",
    "Checkpoint",
    "ChildRunStart",
    "CopiedFrom",
    "DerivedCopy",
    "LabelUsage",
    "MemoryStore",
    "MessageFate",
    "MessageSubmission",
    "OneShotChildRunStart",
    "OneShotRunStart",
    "Page",
    "PurgeReceipt",
    "Record",
    "RecordBuilder",
    "RepairOutcome",
    "RepairResult",
    "RootRunStart",
    "RunCancellation",
    "RunMeta",
    "RunStart",
    "RunStatus",
    "RunSuspension",
    "RunTerminal",
    "SearchHit",
    "SearchPage",
    "Session",
    "SessionAdmin",
    "SessionMessage",
    "SessionPage",
    "SessionStatus",
    "StartOutcome",
    "StartResult",
    "Store",
    "TurnAppend",
    "UsageTotals",
    "payloads",
]
