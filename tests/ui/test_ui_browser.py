"""The inspector in a real browser: Debian's Chromium driven by Playwright, against uvicorn on a loopback port.

Every page is visited with every request the page makes checked (nothing leaves 127.0.0.1), with a dialog
listener (a hostile fact must never open one) and the console watched for Content-Security-Policy reports.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
from conftest import HOSTILE, OPERATOR, TOKEN, Server, operator_store

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the [dev] extra)").expect


class Watched:
    """A browser page with what it did recorded: dialogs, requests to other hosts, console errors."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.foreign: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    def check(self) -> None:
        assert self.dialogs == [], "a dialog opened"
        assert self.foreign == [], "the page asked another host"
        assert self.page.evaluate("typeof window.__pwned") == "undefined", "stored text ran as script"
        assert [e for e in self.errors if not e.startswith("Failed to load resource")] == []  # CSP reports "Refused to"


@pytest.fixture
def watched(browser: Any, server: Server) -> Iterator[Watched]:
    context = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    seen = Watched(page)

    def route(r: Any) -> None:
        if urlparse(r.request.url).hostname != "127.0.0.1":
            seen.foreign.append(r.request.url)
            r.abort()
        else:
            r.continue_()

    context.route("**/*", route)
    yield seen
    seen.check()
    context.close()


def test_the_overview_shows_the_scopes_with_their_counts(watched: Watched) -> None:
    page = watched.page
    page.goto("/")
    team = page.locator('#scopes tr[data-scope="group:team"]')
    expect(team.locator('[data-status="active"]')).to_have_text("2")
    expect(team.locator('[data-status="superseded"]')).to_have_text("1")
    expect(page.locator('#scopes tr[data-scope="global"] [data-status="pending"]')).to_have_text("3")
    expect(page.locator("svg.chart")).to_have_count(2)


def test_the_facts_table_and_a_fact_page(watched: Watched, server: Server) -> None:
    page = watched.page
    page.goto("/facts?scope=group:team&status=superseded")
    row = page.locator(f'#facts tr[data-id="{server.seeded.old_group_fact}"]')
    expect(row).to_be_visible()
    row.get_by_role("link").click()
    expect(page.locator("#author")).to_have_text("alice")
    expect(page.locator("#chain li")).to_have_count(2)
    expect(page.locator("#history")).to_contain_text("superseded")
    page.locator("#chain a", has_text=server.seeded.group_fact).click()
    expect(page.locator("#fact-text")).to_have_text("The staging deploy key rotates every Friday at 17:00 UTC.")


def test_search_as_a_chosen_agent(watched: Watched, server: Server) -> None:
    page = watched.page
    page.goto("/search")
    page.fill('input[name="q"]', "staging deploy")
    page.select_option('select[name="agent"]', "alice")
    page.select_option('select[name="group"]', "team")
    page.click('#search-form button[type="submit"]')
    hit = page.locator(f'#hits tr[data-id="{server.seeded.group_fact}"]')
    expect(hit.locator(".author")).to_have_text("bob")
    expect(hit.locator("td").nth(2)).to_have_text("1")  # its lexical rank
    expect(page.locator(f'#hits tr[data-id="{server.seeded.bob_private}"]')).to_have_count(0)
    page.select_option('select[name="agent"]', "")  # the operator sees bob's private scope too
    page.click('#search-form button[type="submit"]')
    expect(page.locator(f'#hits tr[data-id="{server.seeded.bob_private}"]')).to_have_count(1)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_facts_render_as_text(watched: Watched, server: Server, name: str) -> None:
    page = watched.page
    page.goto(f"/fact/{server.seeded.hostile[name]}")
    text = page.locator("#fact-text")
    if name in ("script", "onerror", "javascript", "long"):
        expect(text).to_have_text(HOSTILE[name])  # shown exactly as written
    else:  # bidi overrides and control characters are shown as visible marks
        expect(text.locator(".esc").first).to_be_visible()
        assert "\u202e" not in text.inner_text() and "\x1b" not in text.inner_text()
    expect(page.locator("#fact-text a, #fact-text img, #fact-text script")).to_have_count(0)
    width = page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert width, "a long line widened the page"
    page.goto("/facts?scope=global&per_page=100")
    expect(page.locator(f'#facts tr[data-id="{server.seeded.hostile[name]}"]')).to_be_visible()


def test_approve_without_the_token_is_refused(watched: Watched, server: Server) -> None:
    page = watched.page
    fact_id = server.seeded.held[0]
    page.goto("/review")
    page.locator(f'#pending tr[data-id="{fact_id}"] button.approve').click()
    expect(page.locator("h1")).to_have_text("403")
    with operator_store(server.seeded.root) as store:
        assert store.operator.get(fact_id).status == "pending"


def test_approve_with_the_token_succeeds(watched: Watched, server: Server) -> None:
    page = watched.page
    fact_id = server.seeded.held[1]
    page.goto("/login")
    page.fill('input[name="token"]', TOKEN)
    page.click('#login button[type="submit"]')
    expect(page).to_have_url(server.url + "/review")
    page.locator(f'#pending tr[data-id="{fact_id}"] button.approve').click()
    expect(page.locator("#done")).to_have_text(f"approved {fact_id}")
    expect(page.locator(f'#pending tr[data-id="{fact_id}"]')).to_have_count(0)
    with operator_store(server.seeded.root) as store:
        assert store.operator.get(fact_id).status == "active"
        assert ("approved", OPERATOR) in [(e.event, e.actor) for e in store.operator.history(fact_id)]


WRITER = textwrap.dedent(
    """
    import sys
    from autogen_shared_memory import SharedMemoryStore
    from autogen_shared_memory.settings import WritePolicy
    from autogen_shared_memory.testing import HashEmbedder

    with SharedMemoryStore(sys.argv[1], embedder=HashEmbedder(), policy=WritePolicy(operator_id="ops-lead")) as store:
        store.as_agent("bob", group="team").remember(sys.argv[2], "group")
    """
)


def test_a_fact_written_by_another_process_appears_live(watched: Watched, server: Server) -> None:
    page = watched.page
    page.goto("/live")
    expect(page.locator("body[data-live=open]")).to_have_count(1)  # the feed is listening
    text = "Written by another process: <img src=x onerror=alert(7)> the \u202erelease train leaves at noon."
    subprocess.run([sys.executable, "-c", WRITER, str(server.seeded.root), text], check=True, timeout=60)
    row = page.locator("#changes tbody tr", has_text="leaves at noon")
    expect(row).to_be_visible(timeout=2000)  # within 2 s of the write's commit, without a reload
    expect(row).to_contain_text("group:team")
    expect(row).to_contain_text("bob")
    expect(row).to_contain_text("<img src=x onerror=alert(7)>")  # text, not an element
    expect(row.locator("img")).to_have_count(0)
    expect(row.locator(".esc")).to_have_text("\\u202e")  # the bidi override shown, not obeyed


@pytest.mark.parametrize("path", ["/records?agent=alice&group=team", "/review", "/live", "/login"])
def test_the_other_pages_load_cleanly(watched: Watched, path: str) -> None:
    page = watched.page
    page.goto(path)
    expect(page.locator("main h1")).to_be_visible()
