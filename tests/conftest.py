"""Shared fixtures: the built site, one local server and one headless Chromium for all tests."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "_site"


@pytest.fixture(scope="session")
def site_dir() -> Path:
    """The built site (./dev test builds it first; built here if it is missing)."""
    if not (SITE / "MANIFEST.json").is_file():
        subprocess.run([sys.executable, str(ROOT / "build.py")], check=True, cwd=ROOT)
    return SITE


@pytest.fixture(scope="session")
def server(site_dir):
    """The site served on 127.0.0.1 (an ephemeral port) for the whole session."""
    import build

    with build.serving(site_dir) as base:
        yield base


@pytest.fixture(scope="session")
def chromium():
    """One headless Chromium (Debian's) with a fresh profile, shared by the browser tests."""
    from playwright.sync_api import sync_playwright

    from tests.browser import chromium_context

    with sync_playwright() as p, chromium_context(p) as ctx:
        yield ctx
