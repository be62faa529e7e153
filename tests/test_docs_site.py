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


#: a common laptop window, where most bash blocks were cut off before the docs' stylesheet wrapped them
LAPTOP_WINDOW = (1280, 900)
#: the blocks that wrap (docs/stylesheets/extra.css); ```text outputs keep their columns and scroll
WRAPPED = ".language-bash pre > code, .language-python pre > code"


def test_no_command_or_code_line_runs_out_of_sight(browser, url):
    """In a 1280 px window every bash and Python block of every written page fits its column: each line wraps
    instead of running past the block's edge."""
    pages = sorted(p.relative_to(ROOT / "docs").with_suffix("") for p in (ROOT / "docs").rglob("*.md")
                   if "hooks" not in p.parts)
    size = browser.get_window_size()
    browser.set_window_size(*LAPTOP_WINDOW)
    measure = ("return Array.from(document.querySelectorAll(arguments[0]))"
               ".map(c => [c.scrollWidth, c.clientWidth, c.textContent.split('\\n')[0]])")
    blocks, cut = 0, []
    try:
        for page in pages:
            path = "".join(f"{part}/" for part in (page.parts[:-1] if page.name == "index" else page.parts))
            browser.get(url + path)
            found = browser.execute_script(measure, WRAPPED)
            blocks += len(found)
            cut += [f"{path or '/'}: {first[:60]!r} ({scroll} px in {client} px)"
                    for scroll, client, first in found if scroll > client]
    finally:
        browser.set_window_size(size["width"], size["height"])
    assert blocks >= 50, f"found {blocks} bash/python blocks: is pymdownx.highlight's pygments_lang_class still on?"
    assert not cut, "cut off at 1280 px:\n" + "\n".join(cut)
