// toolwire pages: what every page shares — the API key in sessionStorage, calls to the JSON APIs,
// errors shown as their sentence, one-shot notices, the navigation, and the sign-in form.
// The key lives in this tab's sessionStorage only; it is sent as a bearer header, never in a
// cookie or a URL. Elements are built from text nodes only, never from HTML strings, so no
// server or model text can become markup.
"use strict";

(() => {
  const KEY = "toolwire.key";
  const ROLE = "toolwire.role";
  const FLASH = "toolwire.flash";
  const CHAT = "toolwire.chat";

  /** A refusal or failure of the API, carrying the server's own sentence. */
  class ApiFailure extends Error {
    constructor(message, { status = 0, code = null, param = null, problems = [] } = {}) {
      super(message);
      this.name = "ApiFailure";
      this.status = status;
      this.code = code;
      this.param = param;
      this.problems = problems;
    }
  }

  const key = () => sessionStorage.getItem(KEY);
  const isAdmin = () => sessionStorage.getItem(ROLE) === "admin";

  function signIn(apiKey, role) {
    sessionStorage.clear();
    sessionStorage.setItem(KEY, apiKey);
    sessionStorage.setItem(ROLE, role);
  }

  function signOut(message) {
    sessionStorage.clear();
    if (message) flash(message);
    location.assign("/login");
  }

  /** The sentence of an error answer: OpenAI's error body, or a plain description of the status. */
  async function failureOf(response) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      // Not JSON (a proxy's page, an empty body): described below by its status.
    }
    const error = body && typeof body === "object" ? body.error : null;
    if (error && typeof error.message === "string") {
      return new ApiFailure(error.message, {
        status: response.status,
        code: error.code ?? null,
        param: error.param ?? null,
        problems: Array.isArray(error.problems) ? error.problems : [],
      });
    }
    const text = response.statusText ? ` (${response.statusText})` : "";
    return new ApiFailure(`The server answered ${response.status}${text}; try again in a moment.`, {
      status: response.status,
    });
  }

  const UNREACHABLE =
    "The toolwire server cannot be reached; check that it is running and your connection, then try again.";

  /** fetch() to the API with the key, answering the failure as an ApiFailure. */
  async function request(method, path, body, options = {}) {
    const headers = { Accept: options.accept || "application/json" };
    const current = options.key ?? key();
    if (current) headers.Authorization = `Bearer ${current}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
        credentials: "omit",
        signal: options.signal,
      });
    } catch (error) {
      if (error && error.name === "AbortError") throw error;
      throw new ApiFailure(UNREACHABLE);
    }
    if (response.status === 401 && !options.key) {
      signOut("Your API key is no longer accepted; sign in again.");
      throw await failureOf(response);
    }
    if (!response.ok) throw await failureOf(response);
    return response;
  }

  /** The JSON answer of an API call (null for 204). */
  async function api(method, path, body, options) {
    const response = await request(method, path, body, options);
    if (response.status === 204) return null;
    return response.json();
  }

  /** A DOM element: el("a", {href: "/x", class: "y"}, "text", otherNode). */
  function el(tag, attributes = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) {
      if (value === false || value === null || value === undefined) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  const byId = (id) => document.getElementById(id);

  /** Show a sentence in an element (hidden when empty). */
  function say(target, message) {
    const node = typeof target === "string" ? byId(target) : target;
    if (!node) return;
    node.textContent = message || "";
    node.hidden = !message;
  }

  /** Fill the table `${id}-rows`, or show `${id}-empty` when there are no rows; the `${id}-loading` note goes. */
  function fillTable(id, rows) {
    byId(`${id}-loading`)?.remove();
    // Each cell carries its column's name, shown beside it when a narrow window stacks the rows.
    const heads = Array.from(byId(`${id}-table`).querySelectorAll("thead th"), (th) => th.textContent);
    for (const row of rows) {
      Array.from(row.children).forEach((cell, index) => cell.setAttribute("data-label", heads[index] || ""));
    }
    byId(`${id}-rows`).replaceChildren(...rows);
    byId(`${id}-table`).hidden = rows.length === 0;
    byId(`${id}-empty`).hidden = rows.length > 0;
  }

  /** A message for the next page (after a redirect), shown once. */
  function flash(message) {
    sessionStorage.setItem(FLASH, message);
  }

  function showFlash() {
    const message = sessionStorage.getItem(FLASH);
    if (!message) return;
    sessionStorage.removeItem(FLASH);
    say("flash", message);
  }

  /** Pretty JSON for display; strings that are JSON are parsed first. */
  function pretty(value) {
    if (typeof value === "string") {
      try {
        return JSON.stringify(JSON.parse(value), null, 2);
      } catch {
        return value;
      }
    }
    return JSON.stringify(value, null, 2);
  }

  function randomId(prefix) {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    return prefix + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function formatDuration(ms) {
    if (typeof ms !== "number") return "";
    return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`;
  }

  /** Only same-site paths are followed after sign-in, so a link cannot send the key elsewhere. */
  function safeNext(value) {
    return value && value.startsWith("/") && !value.startsWith("//") && !value.startsWith("/\\")
      ? value
      : "/chat";
  }

  function guard() {
    const body = document.body;
    if (!body.hasAttribute("data-needs-key")) return true;
    if (!key()) {
      location.replace(`/login?next=${encodeURIComponent(location.pathname + location.search)}`);
      return false;
    }
    for (const link of document.querySelectorAll("[data-admin-only]")) link.hidden = !isAdmin();
    const out = byId("sign-out");
    if (out) out.addEventListener("click", () => signOut("You are signed out."));
    return true;
  }

  function setupLogin() {
    const form = byId("login-form");
    if (!form) return;
    const input = byId("api-key");
    const next = safeNext(new URLSearchParams(location.search).get("next"));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const candidate = input.value.trim();
      input.setAttribute("aria-invalid", "false");
      if (!candidate) {
        say("api-key-error", "Paste your API key first.");
        input.setAttribute("aria-invalid", "true");
        input.focus();
        return;
      }
      const button = form.querySelector("button[type=submit]");
      button.disabled = true;
      say("api-key-error", "");
      try {
        // The audit API answers 200 to an administrator, 403 to any other valid key, 401 otherwise.
        let role = "admin";
        try {
          await api("GET", "/admin/api/audit?limit=1", undefined, { key: candidate });
        } catch (error) {
          if (!(error instanceof ApiFailure) || error.status !== 403) throw error;
          role = "user";
        }
        signIn(candidate, role);
        location.assign(role === "admin" || !next.startsWith("/admin") ? next : "/chat");
      } catch (error) {
        say("api-key-error", error.message);
        input.setAttribute("aria-invalid", "true");
        input.focus();
        input.select();
      } finally {
        button.disabled = false;
      }
    });
  }

  // Ctrl+Enter (Cmd+Enter) in a text box submits its form, as Enter does in a one-line field.
  document.addEventListener("keydown", (event) => {
    const box = event.target;
    if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey) || event.defaultPrevented) return;
    if (box instanceof HTMLTextAreaElement && box.form) {
      event.preventDefault();
      box.form.requestSubmit();
    }
  });

  window.toolwire = {
    ApiFailure,
    CHAT,
    api,
    byId,
    el,
    fillTable,
    flash,
    formatDuration,
    isAdmin,
    key,
    pretty,
    randomId,
    request,
    say,
    failureOf,
  };
  window.toolwire.ready = guard();
  showFlash();
  setupLogin();
})();
