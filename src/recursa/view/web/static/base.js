// recursa web: the Agents View in a browser. Plain JS, no framework, no CDN.
//
// Everything the page knows comes from its own server: POST /api/op/NAME (the
// daemon's people's operations), GET /api/feed (server-sent events of every
// session: which sessions changed), GET /api/events/ID (one session's events,
// live) and GET /api/events/ID/page (its history, backwards, a page at a time).
//
// The token: `recursa web` prints 127.0.0.1:PORT/#token=T (its fragment). A fragment
// never reaches a server; the page takes it out of the address bar at once and
// keeps it in sessionStorage (per origin, so per port: no other local server
// sees it; there is no cookie). Every fetch sends it in an Authorization
// header; an EventSource, which cannot set headers, in its URL's query.
//
// Text from models and sessions is hostile: it only ever enters the page as
// text nodes (el() and textContent), never as markup.
//
// The scripts share one global scope and load in this order (index.html):
// base.js (helpers, the API, state), tree.js, render.js, session.js,
// harness.js, usage.js, main.js (tabs, keys, start).
"use strict";

const PAGE = 300;          // records per history page
const BIG_PAGE = 2000;     // the most the server gives in one page
const FOLD_LINES = 12;     // outputs longer than this are folded
const FOLD_CHARS = 1500;
const REFRESH_MS = 250;    // coalesces tree refreshes when events pour in

// -- small helpers --------------------------------------------------------------------------

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// -- the token ----------------------------------------------------------------------------------

const TOKEN_KEY = "recursa-web-token";

// Reads the fragment (#token=T&session=S) once: the token goes to sessionStorage,
// the fragment leaves the address bar (and the history). Returns the fragment's
// other parameters.
function takeFragment() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ""));
  const given = params.get("token");
  if (given) sessionStorage.setItem(TOKEN_KEY, given);
  params.delete("token");
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
  return params;
}

const fragment = takeFragment();
const TOKEN = sessionStorage.getItem(TOKEN_KEY) || "";

// A URL of the API with the token in its query: for EventSource only.
function withToken(url) {
  return `${url}${url.includes("?") ? "&" : "?"}token=${encodeURIComponent(TOKEN)}`;
}

const authorization = () => ({ authorization: `token ${TOKEN}` });

class ApiError extends Error {
  constructor(kind, message, status) {
    super(message);
    this.kind = kind;
    this.status = status;
  }
}

async function op(name, body) {
  const response = await fetch(`/api/op/${encodeURIComponent(name)}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...authorization() },
    credentials: "omit",
    body: JSON.stringify(body || {}),
  });
  let data = null;
  try { data = await response.json(); } catch (_) { /* no body */ }
  if (!response.ok) {
    const kind = (data && data.kind) || "error";
    const message = (data && data.message) || `${name}: HTTP ${response.status}`;
    throw new ApiError(kind, message, response.status);
  }
  return data;
}

async function getJson(url) {
  const response = await fetch(url, { headers: authorization(), credentials: "omit" });
  const data = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(data && data.kind, (data && data.message) || url, response.status);
  return data;
}

let noticeTimer = null;
function notice(text, level) {
  const bar = $("#notice");
  bar.textContent = text;
  bar.className = level || "error";
  bar.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => { bar.hidden = true; }, level === "info" ? 4000 : 10000);
}

// Runs an action; its failure is one line in the notice bar.
async function act(work, done) {
  try {
    const result = await work();
    if (done) notice(done, "info");
    return result;
  } catch (err) {
    notice(err.message || String(err));
    return undefined;
  }
}

// Each call of a loader takes a ticket; only the newest ticket's reply is drawn,
// so a slow reply to an older request never overwrites a newer one.
function tickets() {
  let last = 0;
  return () => {
    const mine = ++last;
    return () => mine === last;
  };
}

const short = (id) => id || "";  // ids made together share long prefixes: show them whole
const label = (info) => (info ? info.name || short(info.id) : "?");

function tokens(n) {
  if (n < 1000) return String(n);
  if (n < 1e6) return `${(n / 1000).toFixed(n < 10000 ? 1 : 0)}k`;
  return `${(n / 1e6).toFixed(1)}M`;
}

function cost(usage) {
  if (!usage.cost && usage.unknown_cost_calls) return "?";
  const c = usage.cost;
  const text = !c ? "$0" : c < 0.001 ? "<$0.001" : `$${c.toFixed(c < 0.01 ? 3 : 2)}`;
  return usage.unknown_cost_calls ? `${text}+?` : text;
}

function ago(seconds) {
  if (seconds < 0) seconds = 0;
  if (seconds < 60) return `${Math.floor(seconds)}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86400)}d`;
}

const clock = (ts) => new Date(ts * 1000).toLocaleTimeString();
const now = () => Date.now() / 1000;

// -- state ------------------------------------------------------------------------------------

const state = {
  sessions: new Map(),   // id -> SessionInfo
  selected: null,        // session id
  attached: null,        // session id the message box writes to, whatever is shown
  tab: "session",
  dirty: new Set(),      // session ids to re-read
  refreshing: false,     // a re-read is due or in flight
  entry: null,           // HarnessDetail shown
};
