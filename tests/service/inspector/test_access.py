"""[S4] The inspector's login: no, wrong or worker tokens are refused; a scoped one sees its own.

The browser's token lives in an HttpOnly, SameSite=Strict cookie and is
checked on every request exactly like a bearer token (hash, role, scope).
"""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.async_api import Page, expect

from tests.service.inspector.conftest import Demo, log_in
from tests.service.process import ServiceProcess, Tokens

# One event loop for the whole run, shared with the one browser.
pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_no_token_is_sent_to_log_in(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo
) -> None:
    """Every page without a token leads to the login form; fragments and streams answer 401."""
    await page.goto(f"{service.url}/ui/session?id={demo.session_id}")
    await expect(page).to_have_url(re.compile(r"/ui/login\?next="))
    await expect(page.get_by_role("heading", level=1)).to_have_text("Log in to the inspector")
    for path in ("/ui/run/events?id=x", "/ui/session/tree?id=x", "/ui/run/rows?id=x"):
        answer = await page.request.get(f"{service.url}{path}")
        assert answer.status == 401, path
    # Logging in from there leads back to the page asked for.
    await page.get_by_label("Token").fill(tokens.reader)
    await page.get_by_role("button", name="Log in").click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text(demo.session_id)


async def test_wrong_or_worker_token_is_refused(
    page: Page, service: ServiceProcess, tokens: Tokens
) -> None:
    """An unknown token gets 401, a worker token 403; neither gets a cookie."""
    for token, status, says in (
        ("alt_not-a-real-token", 401, "unknown token"),
        (tokens.worker, 403, "may not use the inspector"),
    ):
        await page.goto(f"{service.url}/ui/login")
        await page.get_by_label("Token").fill(token)
        async with page.expect_response(f"{service.url}/ui/login") as answer:
            await page.get_by_role("button", name="Log in").click()
        assert (await answer.value).status == status
        await expect(page.get_by_role("alert")).to_contain_text(says)
        assert await page.context.cookies() == []
    # A forged cookie is checked like a bearer token: refused, and cleared.
    await page.context.add_cookies([{"name": "agentledger_inspector", "value": "alt_forged",
                                     "url": f"{service.url}/ui"}])  # fmt: skip
    answer = await page.goto(f"{service.url}/ui")
    assert answer is not None
    assert answer.status == 401
    await expect(page.get_by_role("alert")).to_contain_text("unknown token")


async def test_login_cookie_is_http_only_and_strict(
    page: Page, service: ServiceProcess, tokens: Tokens
) -> None:
    """A cookie scripts cannot read nor other sites make the browser send; logout clears it."""
    await log_in(page, service.url, tokens.reader)
    (cookie,) = await page.context.cookies()
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/ui"
    assert await page.evaluate("document.cookie") == ""
    await page.get_by_role("button", name="Log out").click()
    await expect(page).to_have_url(re.compile(r"/ui/login$"))
    assert await page.context.cookies() == []


async def test_cross_site_login_post_is_refused(service: ServiceProcess, tokens: Tokens) -> None:
    """A login posted by another site's page is refused and sets no cookie (login CSRF)."""
    async with httpx.AsyncClient() as client:
        answer = await client.post(
            f"{service.url}/ui/login",
            data={"token": tokens.reader},
            headers={"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
        )
    assert answer.status_code == 403
    assert "set-cookie" not in answer.headers


async def test_scoped_token_sees_only_its_sessions(
    page: Page, service: ServiceProcess, tokens: Tokens, demo: Demo
) -> None:
    """A reader scoped to tenant=acme lists acme's sessions only; the others' are not found."""
    await log_in(page, service.url, tokens.acme)  # type: ignore[attr-defined]
    ids = await page.locator("table tbody th a").all_inner_texts()
    assert ids == [demo.acme_session]
    await expect(page.locator(".who")).to_contain_text("tenant=acme")
    # Asking for another tenant's sessions finds none, and says why.
    await page.get_by_label("Labels").fill("tenant=globex")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator("table tbody")).to_contain_text("No sessions")
    await expect(page.get_by_role("status").first).to_contain_text("only sees sessions")
    for path in (
        f"/ui/session?id={demo.globex_session}",
        f"/ui/session?id={demo.session_id}",
        f"/ui/run/transcript?id={(await _first_run(service, tokens, demo))}",
    ):
        answer = await page.goto(f"{service.url}{path}")
        assert answer is not None
        # Outside the scope is answered as missing: nothing tells it from an id never used.
        assert answer.status == 404, path
        await expect(page.get_by_role("alert")).to_contain_text("not found")
    answer = await page.request.get(f"{service.url}/ui/session/events?id={demo.session_id}")
    assert answer.status == 404
    # Its own session's run is open to it.
    await page.goto(f"{service.url}/ui/run/transcript?id={demo.rich_run}")
    await expect(page.locator("li.bubble")).to_have_count(3)


async def _first_run(service: ServiceProcess, tokens: Tokens, demo: Demo) -> str:
    """A run of the demo's session, read with an unscoped token."""
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {tokens.reader}"}) as client:
        page = await client.get(f"{service.url}/ui/session/tree", params={"id": demo.session_id})
    found = re.search(r'data-run="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)
