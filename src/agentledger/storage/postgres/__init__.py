"""The PostgreSQL backend: ``PostgresStore``, for many workers sharing one database.

Needs agentledger's ``[postgres]`` extra (psycopg 3 and its pool)::

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
    from agentledger._extras import needs_extra

    raise needs_extra("agentledger.storage.postgres", "postgres", e) from e

from agentledger.storage.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
