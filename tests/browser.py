"""Headless Chromium for the tests that open a page (the serve page, the docs site): Debian's ``chromium`` and
``chromedriver`` driven by selenium. Missing, they skip the test with how to install them; under
``BERTKIT_REQUIRE_BROWSER=1`` (CI) a missing browser fails it instead."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

#: CI sets it: there a missing browser is a failure, not a skip.
REQUIRE_BROWSER = os.environ.get("BERTKIT_REQUIRE_BROWSER") == "1"
INSTALL = "apt-get install chromium chromium-driver && pip install selenium"


def missing() -> str | None:
    """Why no browser can run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return f"selenium is not installed ({INSTALL})"
    for name in ("chromium", "chromedriver"):
        if shutil.which(name) is None:
            return f"{name} is not on PATH ({INSTALL})"
    return None


def require_or_skip(reason: str | None) -> None:
    """Skip with ``reason`` (fail under BERTKIT_REQUIRE_BROWSER=1); nothing when ``reason`` is None."""
    if reason:
        if REQUIRE_BROWSER:
            pytest.fail(f"BERTKIT_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)


def chromium() -> Iterator:
    """A headless Chromium driver (a generator for a fixture: yields it, quits after)."""
    require_or_skip(missing())
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1200,900"):
        options.add_argument(argument)
    # an explicit driver path: Selenium Manager (which downloads drivers) never runs
    driver = webdriver.Chrome(service=webdriver.ChromeService(shutil.which("chromedriver")), options=options)
    try:
        yield driver
    finally:
        driver.quit()
