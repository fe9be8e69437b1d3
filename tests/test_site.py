"""The documentation site and an analysis report in a real browser (headless Chromium, driven by Playwright): every
page loads, every image has a non-zero natural size, nothing logs an error or reaches off the machine, and every
internal link resolves, to a file that exists and, with a fragment, to an element that has that id."""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urldefrag

import pytest
import torch
from transformers import AutoTokenizer, BertModel

import tisa_hf
from tests.fixtures import WORD_PIECE_SIZES, tiny_config
from tisa_hf.analysis import AnalysisOptions, analyze_model, save_figures, write_html

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
MISSING = [name for name in ("playwright", "mkdocs") if importlib.util.find_spec(name) is None]
MISSING += [] if CHROMIUM else ["a chromium executable"]

# Every image that has not loaded, every link of the page, and every id an anchor can point at.
PAGE_FACTS = """() => ({
    images: document.images.length,
    brokenImages: Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src),
    links: Array.from(document.querySelectorAll('a[href]'), a => a.href),
    ids: Array.from(document.querySelectorAll('[id]'), e => e.id),
})"""


class StaticHandler(SimpleHTTPRequestHandler):
    """Serves files as a static host does: a folder without index.html is not found (no listing)."""

    def list_directory(self, path):
        self.send_error(404, "no index.html")

    def log_message(self, *args):
        pass


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        """A browser that moves on before a response is complete breaks the pipe; that is no error of the site."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    server = QuietServer(("127.0.0.1", 0), functools.partial(StaticHandler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser():
    if MISSING:
        reason = f"the browser test needs {', '.join(MISSING)} (pip install -e '.[docs]'; apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def site(browser, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(folder)],
        cwd=ROOT,
        check=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    return folder


def visit(browser, base: str, start: str) -> dict[str, dict]:
    """Opens `start` and every page it leads to under `base`; per page, what went wrong (empty when nothing)."""
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda message: message.type == "error" and problems.append(f"console: {message.text}"))
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))

    def local_only(route):
        if route.request.url.startswith((base, "data:")):
            route.continue_()
        else:
            problems.append(f"request off the machine: {route.request.url}")
            route.abort()

    page.route("**/*", local_only)
    visited: dict[str, dict] = {}
    queue = [start]
    while queue:
        url = queue.pop()
        if url in visited:
            continue
        problems.clear()
        response = page.goto(url, wait_until="load")
        facts = page.evaluate(PAGE_FACTS)
        if response is None or response.status != 200:
            problems.append(f"HTTP {response.status if response else 'no response'}")
        problems.extend(f"image without pixels: {src}" for src in facts["brokenImages"])
        visited[url] = {**facts, "problems": list(problems), "ids": set(facts["ids"])}
        for link in facts["links"]:
            target = urldefrag(link).url
            if target.startswith(base) and (target.endswith("/") or target.endswith(".html")):
                queue.append(target)
    page.close()
    return visited


def unresolved_links(visited: dict[str, dict], base: str) -> list[str]:
    """Internal links to a file that is not there, or to an id that the page lacks."""
    broken = []
    for source, facts in visited.items():
        for link in facts["links"]:
            target, fragment = urldefrag(link)
            if not target.startswith(base):
                continue
            if target in visited:
                if fragment and unquote(fragment) not in visited[target]["ids"]:
                    broken.append(f"{source} -> {link}: no such id")
                continue
            try:
                urllib.request.urlopen(target).close()
            except urllib.error.HTTPError as error:
                broken.append(f"{source} -> {link}: HTTP {error.code}")
    return broken


def test_every_page_of_the_site_works_in_a_browser(browser, site):
    with serve(site) as base:
        visited = visit(browser, base, base)
        broken = unresolved_links(visited, base)
    guides = {"using/", "adapting/", "long-documents/", "fine-tuning/", "analysis/", "performance/", "api/"}
    assert {base + name for name in guides} <= set(visited)
    assert {url: facts["problems"] for url, facts in visited.items() if facts["problems"]} == {}
    assert sum(facts["images"] for facts in visited.values()) > 0
    assert broken == []


def test_analysis_report_works_in_a_browser(browser, tmp_path):
    torch.manual_seed(0)
    config = tiny_config("bert", **WORD_PIECE_SIZES)
    model = tisa_hf.patch(BertModel(config), tisa_hf.TisaConfig(num_kernels=2, init="random"))
    tokenizer = AutoTokenizer.from_pretrained(tisa_hf.minilm_path())
    result = analyze_model(model, tokenizer, "tiny", AnalysisOptions(max_len=32, progress=False, variance_batch=4))
    figures = save_figures(result, tmp_path)
    report = write_html(result, figures, tmp_path)
    with serve(tmp_path) as base:
        (facts,) = visit(browser, base, base + report.name).values()
    assert facts["problems"] == []
    assert facts["images"] == len(figures)
