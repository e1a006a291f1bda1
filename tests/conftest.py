"""Shared fixtures: the built site, one local server and one headless Chromium for all tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SITE = Path(os.environ.get("GUIDE_SITE", ROOT / "_site")).resolve()   # the build under test


def built_chapters() -> list[dict]:
    """Chapters (number, title, file, figures) of the site under test, for parametrizing."""
    listing = SITE / "chapters.json"
    if listing.is_file():
        return json.loads(listing.read_text())
    from builder.pages import read_chapters
    return [{"number": c.number, "title": c.title, "file": c.file, "figures": c.figures}
            for c in read_chapters()]


@pytest.fixture(scope="session")
def site_dir() -> Path:
    """The built site (./dev test builds it first; built here if it is missing)."""
    if not (SITE / "MANIFEST.json").is_file():
        subprocess.run([sys.executable, str(ROOT / "build.py"), "--out", str(SITE)], check=True, cwd=ROOT)
    return SITE


@pytest.fixture(scope="session")
def server(site_dir):
    """The site served on 127.0.0.1 (an ephemeral port) for the whole session."""
    from builder.serve import serving

    with serving(site_dir) as base:
        yield base


@pytest.fixture(scope="session")
def playwright_session():
    """Playwright, started once: its sync API cannot run twice in one process at a time."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def chromium(playwright_session):
    """One headless Chromium (Debian's) with a fresh profile, shared by the browser tests.
    It blocks the service worker, so that what one test's visit saved for offline reading
    never answers another test's requests (or hides them from its routes); the service
    worker is tested in contexts of its own (tests/test_offline.py)."""
    from tests.browser import chromium_context

    with chromium_context(playwright_session, service_workers="block") as ctx:
        yield ctx
