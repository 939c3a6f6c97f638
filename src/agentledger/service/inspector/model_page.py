"""The inspector's page of one planner turn as the model saw it (``/ui/run/turn``).

What the request held (system prompt, the messages after the history policy), what the
model answered (message, usage, stop reason as inferred), and what changed since the
previous request, all from :mod:`agentledger.views.model_view`; with ``provider`` the
request body that provider's adapter encodes. What the log does not hold is said on the
page, never made up.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from litestar import Request, Response

from agentledger.errors import ValidationError
from agentledger.service.auth import Principal
from agentledger.service.inspector.conversation import pretty_json
from agentledger.service.inspector.digest import read_log
from agentledger.service.inspector.pages import Pages, html, param
from agentledger.service.inspector.render import render
from agentledger.views.model_view import PROVIDERS, model_turn

__all__ = ["model_turn_page"]

_ANY = Request[Any, Any, Any]


async def model_turn_page(pages: Pages, request: _ANY, principal: Principal) -> Response[Any]:
    """``/ui/run/turn?id=RUN&turn=N[&provider=P]``.

    Raises:
        ValidationError: no turn number, or no such planner turn.
    """
    run_id = param(request, "id")
    await pages.in_scope(principal, "inspect_run", "run", run_id)
    text = param(request, "turn")
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise ValidationError(field="turn", expected="a planner turn number (1, 2, ...)", got=text)
    view = await model_turn(pages.store, run_id, int(text))
    provider = param(request, "provider")
    body = body_error = ""
    if provider:
        try:
            body = pretty_json(view.provider_request(provider))
        except ValidationError as e:  # a transcript error is one
            body_error = str(e)
    log = await read_log(pages.store.list_run_records, run_id)
    header = await pages._run_header(run_id, log)
    context = {f.name: getattr(header, f.name) for f in dataclasses.fields(header)}
    return html(
        render(
            "model_turn.html",
            principal=principal,
            tab="timeline",
            view=view,
            provider=provider,
            providers=PROVIDERS,
            body=body,
            body_error=body_error,
            **context,
        )
    )
