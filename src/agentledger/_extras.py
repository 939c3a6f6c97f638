"""The words for an optional extra that is not installed, in the library and the CLI alike.

agentledger is not on the Python package index (``pip install 'agentledger[X]'``
would fetch an unrelated project), so the hint names the checkout or wheel this
copy was installed from, which pip records (``direct_url.json``, PEP 610).
"""

from __future__ import annotations

__all__ = ["install_command", "needs_extra"]


def install_command(extra: str) -> str:
    """The command adding ``extra`` to this installation, from where it was installed."""
    import json
    from importlib import metadata
    from urllib.parse import unquote, urlparse

    try:
        recorded = metadata.distribution("agentledger").read_text("direct_url.json")
        origin: dict[str, object] = json.loads(recorded or "{}")
    except (metadata.PackageNotFoundError, ValueError):
        origin = {}
    url = str(origin.get("url", ""))
    if not url.startswith("file://"):
        return (
            f"install agentledger again from its checkout or wheel with [{extra}] "
            f"(pip install '.[{extra}]' in the checkout)"
        )
    path = unquote(urlparse(url).path)
    dir_info = origin.get("dir_info")
    editable = "-e " if isinstance(dir_info, dict) and dir_info.get("editable") else ""
    return f"pip install {editable}'{path}[{extra}]'"


def needs_extra(what: str, extra: str, error: ImportError) -> ModuleNotFoundError:
    """The error to raise from ``error`` (a module of ``extra`` missing) when ``what``
    (a module, a feature) is used; it names the missing module as ``error`` did."""
    missing = error.name or str(error)
    return ModuleNotFoundError(
        f"{what} needs agentledger's [{extra}] extra, which is not installed "
        f"(no module {missing!r}): {install_command(extra)}",
        name=error.name,
    )
