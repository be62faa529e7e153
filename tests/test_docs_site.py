"""The docs site as a reader meets it: built strict (``mkdocs build --strict``, as ``make docs`` and CI do), served
over HTTP on 127.0.0.1, opened in headless Chromium; Material's search box finds what people look for and lands on
the page that answers it."""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from browser import REQUIRE_BROWSER, chromium

ROOT = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT_S = 300
WAIT_S = 30
#: a search a reader types -> the page that must come up (its URL path under the site)
SEARCHES = {"Matryoshka": "how-to/train-embeddings/", "dask worker": "how-to/pretrain-a-corpus/"}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        reason = "mkdocs is not installed (pip install -e '.[docs]')"
        if REQUIRE_BROWSER:
            pytest.fail(f"BERTKIT_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "-q", "-d", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


@pytest.fixture(scope="module")
def url(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def browser():
    yield from chromium()


def test_the_built_site_has_every_page_of_the_nav(site):
    for page in ("index.html", "how-to/train-embeddings/index.html", "reference/cli/index.html",
                 "reference/python/index.html", "reference/http/index.html", "benchmarks/index.html",
                 "changelog/index.html", "search/search_index.json"):
        assert (site / page).is_file(), page


@pytest.mark.parametrize(("query", "page"), SEARCHES.items())
def test_search_finds_the_page_that_answers(browser, url, query, page):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    wait = WebDriverWait(browser, WAIT_S)
    box = wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "input.md-search__input")))
    if not box.is_displayed():  # a narrow window: the header's search button opens the box
        browser.find_element(By.CSS_SELECTOR, "label.md-header__button[for='__search']").click()
    box = wait.until(ready.element_to_be_clickable((By.CSS_SELECTOR, "input.md-search__input")))
    box.click()
    box.send_keys(query)
    link_selector = f"a.md-search-result__link[href*='{page}']"
    link = wait.until(ready.element_to_be_clickable((By.CSS_SELECTOR, link_selector)),
                      f"searching {query!r}: no result links to {page} within {WAIT_S} s")
    link.click()
    wait.until(lambda driver: page in driver.current_url)
    body = browser.find_element(By.CSS_SELECTOR, "article.md-content__inner").text
    assert query.split()[0].lower() in body.lower(), f"{browser.current_url} does not mention {query!r}"
