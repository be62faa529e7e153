// The page of `bertkit serve`: ask `info` which task the server answers, show that task's form, send it to
// the task's route and draw the answer. Routes and JSON shapes: serving/CONTRACT.md.
// Every URL is relative ("info", not "/info") so the page works behind a path prefix.
"use strict";

// Other names a server may report for a task -> the form that serves it.
const TASK_ALIASES = {
  "text-classification": "classify", "sentiment-analysis": "classify",
  "token-classification": "ner", "tag": "ner",
  "question-answering": "qa",
  "sentence-embeddings": "embeddings", "feature-extraction": "embeddings",
};

// What the `info` panel shows, in order: field -> caption.
const INFO_FIELDS = {
  model_id: "model", task: "task", model_dtype: "dtype", max_input_length: "max input tokens",
  max_batch_tokens: "max batch tokens", max_client_batch_size: "max inputs per request",
  max_concurrent_requests: "max concurrent requests", labels: "labels", version: "bertkit",
};

const $ = (id) => document.getElementById(id);
const value = (id) => $(id).value;
const fmt = (x) => Number(x).toFixed(3);

/** A new element; string children become text nodes, so user text is never parsed as HTML. */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, val] of Object.entries(attrs)) node.setAttribute(name, val);
  node.append(...children);
  return node;
}

// ------------------------------------------------------------------ talking to the server

/** What each refusal is, for people (the server's error_type is text-embeddings-inference's, coarser). */
const STATUS_NAMES = {
  400: "Empty input", 401: "Unauthorized", 404: "Not found", 408: "Too slow", 413: "Too large",
  422: "Invalid input", 424: "Not this model's task", 429: "Overloaded", 500: "Model failure", 503: "Unavailable",
};

class ApiError extends Error {
  constructor(status, type, message, retryAfter = null) {
    super(message);
    this.status = status;
    this.type = type;
    this.retryAfter = retryAfter;
  }
}

/** GET `path` (no body) or POST `body` as JSON; the parsed answer, or an ApiError from the error body. */
async function api(path, body) {
  const headers = { Accept: "application/json" };
  const key = value("api-key").trim();
  if (key) headers.Authorization = `Bearer ${key}`;
  const init = { method: body === undefined ? "GET" : "POST", headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, "Network", `could not reach the server (${err.message}).`);
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    // not JSON (a proxy's error page, say): the raw text is the message
  }
  if (!response.ok) {
    throw new ApiError(response.status,
                       STATUS_NAMES[response.status] || data?.error_type || response.statusText || "Error",
                       errorMessage(data, text), response.headers.get("Retry-After"));
  }
  return data;
}

/** The readable part of an error body: ours is {error, error_type}; FastAPI's default is {detail}. */
function errorMessage(data, text) {
  if (typeof data?.error === "string") return data.error;
  if (typeof data?.detail === "string") return data.detail;
  if (Array.isArray(data?.detail)) {
    return data.detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
  }
  return text || "no details.";
}

// ------------------------------------------------------------------ drawing answers

/** `text` as nodes with each span's characters in a <mark>; spans: [{start, end, attrs}] in code points.
 *  The server's offsets are Python string indices (code points) while JS strings count UTF-16 units,
 *  so the text is sliced as an array of code points: an emoji must not shift the highlights after it. */
function highlight(text, spans) {
  const chars = Array.from(text);
  const nodes = [];
  let at = 0;
  for (const span of [...spans].sort((a, b) => a.start - b.start)) {
    if (span.start < at || span.end <= span.start) continue; // overlapping or empty: the earlier one wins
    nodes.push(chars.slice(at, span.start).join(""));
    nodes.push(el("mark", span.attrs || {}, chars.slice(span.start, span.end).join("")));
    at = span.end;
  }
  nodes.push(chars.slice(at).join(""));
  return nodes;
}

/** A list of label / bar / score rows; rows: [{label, score, note?}] with scores in [0, 1]. */
function scoreList(rows, tag = "ul") {
  return el(tag, { class: "scores" }, ...rows.map((row) => {
    const fill = el("span", { style: `width: ${(Math.min(Math.max(row.score, 0), 1) * 100).toFixed(1)}%` });
    const label = el("span", { class: "label" }, el("span", { class: "name" }, row.label));
    if (row.note) label.append(el("small", { class: "note" }, row.note));
    return el("li", {}, label, el("span", { class: "bar" }, fill), el("span", { class: "score" }, fmt(row.score)));
  }));
}

function cosine(a, b) {
  let dot = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return dot / Math.sqrt(aa * bb);
}

// Per task: the route and body its form sends, and how the answer is drawn (render gets the body sent,
// so it draws the text that was asked about even if the form changed meanwhile).
const TASKS = {
  embeddings: {
    request: () => ["embed", { inputs: [value("text"), value("text2")], normalize: true }],
    render: ([a, b]) => {
      const similarity = cosine(a, b);
      return [el("p", { class: "big" }, "Cosine similarity ",
                 el("output", { id: "similarity" }, Number.isFinite(similarity) ? fmt(similarity) : "n/a")),
              el("p", { class: "muted" }, `${a.length}-dimensional embeddings.`)];
    },
  },
  classify: {
    request: () => ["predict", { inputs: value("text") }],
    render: (labels) => [scoreList(labels.map((l) => ({ label: l.label, score: l.score })))],
  },
  ner: {
    request: () => ["ner", { inputs: value("text"), aggregation_strategy: "simple" }],
    render: (entities, body) => {
      const spans = entities.map((e) => ({
        start: e.start, end: e.end, attrs: { "data-label": e.entity_group, title: `${e.entity_group} ${fmt(e.score)}` },
      }));
      const text = el("p", { class: "text" }, ...highlight(body.inputs, spans));
      return entities.length ? [text] : [text, el("p", { class: "muted" }, "No entities found.")];
    },
  },
  qa: {
    request: () => ["qa", { question: value("question"), context: value("context"), top_k: 1 }],
    render: (answer, body) => {
      const best = Array.isArray(answer) ? answer[0] : answer;
      if (!best || best.end <= best.start) {
        return [el("p", { class: "muted" }, "No answer found in the context."), el("p", { class: "text" }, body.context)];
      }
      return [el("p", { class: "big" }, "Answer ", el("strong", { class: "answer" }, best.answer),
                 " ", el("span", { class: "muted" }, "score "), el("output", { class: "score" }, fmt(best.score))),
              el("p", { class: "text" }, ...highlight(body.context, [{ start: best.start, end: best.end }]))];
    },
  },
  "fill-mask": {
    request: () => ["fill-mask", { inputs: value("text"), top_k: 5 }],
    render: (answer) => {
      const masks = Array.isArray(answer[0]) ? answer : [answer]; // several masks: a list per mask
      return masks.flatMap((candidates, i) => [
        ...(masks.length > 1 ? [el("h3", {}, `Mask ${i + 1}`)] : []),
        scoreList(candidates.map((c) => ({ label: c.token_str, score: c.score, note: c.sequence })), "ol"),
      ]);
    },
  },
  rerank: {
    request: () => ["rerank", {
      query: value("query"),
      texts: value("passages").split("\n").map((line) => line.trim()).filter(Boolean),
      return_text: true,
    }],
    render: (ranked, body) => [scoreList(ranked.map((r) => ({ label: r.text ?? body.texts[r.index], score: r.score })),
                                         "ol")],
  },
};

// a ColBERT model reranks by MaxSim on the same route, with the same form (its scores are sums, not in [0, 1])
TASKS.colbert = TASKS.rerank;

// ------------------------------------------------------------------ page state

let task = null; // the key of TASKS the form is built for

/** body[data-state]: loading | ready | busy | done | error; the tests wait on it. */
function setState(state) {
  document.body.dataset.state = state;
}

function showError(err) {
  const box = $("error");
  const status = err.status ? ` (HTTP ${err.status})` : "";
  box.replaceChildren(el("strong", {}, `${err.type || "Error"}${status}: `), err.message);
  if (err.status === 401) box.append(el("p", {}, "Enter the server's API key above and press Connect."));
  if (err.status === 429 && err.retryAfter) box.append(el("p", {}, `Try again in ${err.retryAfter} s.`));
}

function showInfo(info) {
  $("task").textContent = info.task;
  const rows = Object.entries(INFO_FIELDS)
    .filter(([field]) => info[field] !== undefined && info[field] !== null)
    .flatMap(([field, caption]) => {
      const shown = Array.isArray(info[field]) ? info[field].join(", ") : String(info[field]);
      return [el("dt", {}, caption), el("dd", { "data-field": field }, shown)];
    });
  $("info").replaceChildren(...rows);
  $("info").hidden = false;
}

function showForm(name) {
  const template = $(`form-${name}`);
  if (!template || !TASKS[name]) {
    task = null;
    $("form").hidden = true;
    throw new ApiError(0, "Task", `this page has no form for the task '${name}'; the API still answers (see docs).`);
  }
  if (name !== task) { // a reconnect to the same task keeps what was typed
    $("fields").replaceChildren(template.content.cloneNode(true));
    $("run").textContent = template.dataset.run;
    $("result").replaceChildren();
    task = name;
  }
  $("form").hidden = false;
}

async function connect(event) {
  event?.preventDefault();
  setState("loading");
  $("error").replaceChildren();
  try {
    const info = await api("info");
    showInfo(info);
    showForm(TASK_ALIASES[info.task] || info.task);
    setState("ready");
  } catch (err) {
    if (err.status) { // the server refused (a missing key, say): nothing is served to this page yet
      $("task").textContent = "not connected";
      $("form").hidden = true;
    }
    showError(err);
    setState("error");
  }
}

async function run(event) {
  event.preventDefault();
  const [path, body] = TASKS[task].request();
  setState("busy");
  $("run").disabled = true;
  $("error").replaceChildren();
  $("result").replaceChildren();
  try {
    const answer = await api(path, body);
    $("result").replaceChildren(...TASKS[task].render(answer, body));
    setState("done");
  } catch (err) {
    showError(err);
    setState("error");
  } finally {
    $("run").disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("auth").addEventListener("submit", connect);
  $("form").addEventListener("submit", run);
  $("form").addEventListener("keydown", (event) => { // Enter in a textarea is a new line; Ctrl+Enter runs
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("form").requestSubmit();
  });
  connect();
});
