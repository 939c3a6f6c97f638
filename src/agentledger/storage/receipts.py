"""Purge receipts [D7]: computed once from what a purge deletes, kept with the tombstone.

A backend stores a receipt as :func:`encode_receipt` text next to the session's
tombstone and hands it back through :func:`decode_receipt`. A tombstone written
before receipts existed stores nothing (NULL): its receipt is
:func:`unknown_receipt`, whose counts are None and digest is "".
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from agentledger.errors import CorruptRecordError
from agentledger.storage.session_image import SessionImage, image_byte_total, session_digest
from agentledger.storage.types import PurgeReceipt

__all__ = ["decode_receipt", "encode_receipt", "purge_receipt", "unknown_receipt"]

_DECODER = msgspec.json.Decoder(PurgeReceipt)


def purge_receipt(image: SessionImage, purged_at: datetime) -> PurgeReceipt:
    """The receipt of a purge that deletes exactly ``image``."""
    return PurgeReceipt(
        session_id=image.session.id,
        runs=len(image.runs),
        records=len(image.records),
        checkpoints=len(image.checkpoints),
        bytes=image_byte_total(image),
        digest=session_digest(image),
        purged_at=purged_at,
        messages=len(image.messages),
    )


def unknown_receipt(session_id: str) -> PurgeReceipt:
    """The receipt of a tombstone that predates receipts: nothing known but the id."""
    return PurgeReceipt(
        session_id=session_id,
        runs=None,
        records=None,
        checkpoints=None,
        bytes=None,
        digest="",
        purged_at=None,
    )


def encode_receipt(receipt: PurgeReceipt) -> str:
    """The text a backend stores with the tombstone."""
    return msgspec.json.encode(receipt).decode()


def decode_receipt(session_id: str, stored: str | bytes | None) -> PurgeReceipt:
    """The receipt a tombstone keeps; NULL (a pre-receipt tombstone) is :func:`unknown_receipt`.

    Raises:
        CorruptRecordError: the stored text is not a receipt of this session.
    """
    if stored is None:
        return unknown_receipt(session_id)
    try:
        receipt = _DECODER.decode(stored)
    except msgspec.DecodeError as e:
        raise CorruptRecordError(
            run_id="", record_id="", reason=f"purge receipt of session {session_id!r}: {e}"
        ) from e
    if receipt.session_id != session_id:
        raise CorruptRecordError(
            run_id="",
            record_id="",
            reason=f"purge receipt of session {session_id!r} names {receipt.session_id!r}",
        )
    return receipt
