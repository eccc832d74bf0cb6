"""Screenshots of every page of the inspector for docs/ui.md (docs/img/ui-*.png): a small seeded store served
by uvicorn on a loopback port, photographed by Debian's Chromium through Playwright.

Run from the repository root: ``python tests/ui/make_screenshots.py`` (not a test: pytest does not collect it).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

sys.path.insert(0, str(Path(__file__).parent))
from conftest import POLICY, TOKEN, make_inspector, serve

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.testing import HashEmbedder
from autogen_shared_memory.ui import create_app

OUT = Path(__file__).resolve().parents[2] / "docs" / "img"


def seed(root: Path) -> dict[str, str]:
    store = SharedMemoryStore(str(root), embedder=HashEmbedder(), policy=POLICY)
    with store:
        planner = store.as_agent("release:planner", group="release", join=True)
        coder = store.as_agent("release:coder", group="release", join=True)
        reviewer = store.as_agent("release:reviewer", group="release", join=True)
        support = store.as_agent("support:triage", group="support", join=True)
        store.operator.remember("Answers to customers are in English and cite a ticket number.", "global")
        old = planner.remember("The 2.4 release is planned for March 3.", "group", tags=["release"])
        planner.remember(
            "The 2.4 release moved to March 10: the migration needs a second review.",
            "group",
            supersedes=[old.id],
            tags=["release"],
        )
        for i, text in enumerate(
            [
                "The staging database is reset every night at 02:00 UTC.",
                "Feature flags live in config/flags.yaml; the release branch freezes them.",
                "The payments service must be deployed before the web front end.",
                "Rollbacks are announced in #ops before they start.",
                "The load test of 2.4 reached 1,800 requests per second at p99 240 ms.",
            ]
        ):
            (coder if i % 2 else reviewer).remember(text, "group", tags=["ops"])
        coder.remember("My draft of the migration lives on branch mig-2.4.", "agent")
        for text in [
            "Customers on the legacy plan get the old invoice layout.",
            "Refunds over 500 EUR need a second approver.",
        ]:
            support.remember(text, "group")
        coder.remember("All deploys need two approvals.", "global")
        support.remember("The support inbox is answered within four hours.", "global")
        store.operator.remember('<script>alert("hi")</script> is stored and shown as text, never run', "global")
        planner.log_message("Plan the 2.4 release: migration first, then the front end.", role="user", source="lead")
        planner.log_message("Migration on March 6, review on March 7, release March 10.", role="assistant")
        coder.log_tool_call("memory_search", {"query": "migration branch"}, "1 hit", duration_ms=9.0)
        store.for_agent("release:planner", "release").create_task(
            "Second review of the migration", assignee="release:reviewer"
        )
        store.for_agent("release:planner", "release").register(display_name="Planner", capabilities=["planning"])
        store.for_agent("release:coder", "release").register(display_name="Coder", capabilities=["python", "sql"])
        planner.case_log().append("Decided: 2.4 waits for the second migration review.")
    return {"old": old.id}


def main() -> None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        ids = seed(root)
        inspector = make_inspector(root)
        try:
            for url in serve(create_app(inspector, token=TOKEN)):
                with sync_playwright() as playwright:
                    browser = playwright.chromium.launch(executable_path=chromium)
                    page = browser.new_page(base_url=url, viewport={"width": 1280, "height": 800})
                    shots = {
                        "overview": "/",
                        "facts": "/facts?scope=group:release",
                        "fact": f"/fact/{ids['old']}",
                        "search": "/search?q=release+migration&agent=release:coder&group=release",
                        "records": "/records?agent=release:planner&group=release",
                    }
                    for name, path in shots.items():
                        page.goto(path)
                        page.screenshot(path=OUT / f"ui-{name}.png", full_page=name != "facts")
                    page.goto("/login")
                    page.fill('input[name="token"]', TOKEN)
                    page.click('#login button[type="submit"]')
                    page.screenshot(path=OUT / "ui-review.png")
                    page.goto("/live")
                    expect(page.locator("body[data-live=open]")).to_have_count(1)
                    with SharedMemoryStore(str(root), embedder=HashEmbedder(), policy=POLICY) as writer:
                        writer.as_agent("release:reviewer", group="release").remember(
                            "Second review of the migration passed.", "group"
                        )
                    expect(page.locator("#changes tbody tr.fresh")).to_have_count(1)
                    page.screenshot(path=OUT / "ui-live.png")
                    browser.close()
        finally:
            inspector.store.close()
    print("written:", ", ".join(sorted(p.name for p in OUT.glob("ui-*.png"))))


if __name__ == "__main__":
    main()
