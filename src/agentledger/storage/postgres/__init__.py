"""The PostgreSQL backend: ``PostgresStore``, for many workers sharing one database.

Install with ``pip install 'agentledger[postgres]'`` (psycopg 3 and its pool)::

    from agentledger.storage.postgres import PostgresStore

    async with await PostgresStore.open("postgresql://app@db/agentledger", max_size=20) as store:
        ...

:meth:`PostgresStore.open` applies pending schema migrations (recorded in
``_agentledger_migrations``); :mod:`agentledger.storage.postgres.migrations`
lists and applies them separately.
"""

try:
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "agentledger.storage.postgres needs psycopg 3 and psycopg-pool: "
        "pip install 'agentledger[postgres]'"
    ) from e

from agentledger.storage.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
