// The chat page: send a message to POST /v1/chat with stream=true, read its Server-Sent Events
// (text.delta, call.proposed, call.finished, done, error) from the fetch body, and show the answer
// as it streams with each tool call under it. The conversation (its id and what was shown) is kept
// in sessionStorage, so it continues across messages and survives a reload of the tab.
"use strict";

(() => {
  const tw = window.toolwire;
  if (!tw || !tw.ready) return;
  const { el, byId } = tw;

  const transcript = byId("transcript");
  const form = byId("chat-form");
  const input = byId("chat-input");
  const send = byId("chat-send");
  let state = load();
  let running = null;

  function load() {
    try {
      const saved = JSON.parse(sessionStorage.getItem(tw.CHAT) || "null");
      if (saved && Array.isArray(saved.messages)) return saved;
    } catch {
      // A damaged entry starts a new conversation.
    }
    return { conversation_id: null, messages: [] };
  }

  function save() {
    sessionStorage.setItem(tw.CHAT, JSON.stringify(state));
  }

  function compact(value) {
    const text = typeof value === "string" ? value : JSON.stringify(value);
    return text.length > 90 ? `${text.slice(0, 89)}…` : text;
  }

  /** One tool call: a summary line (name, arguments, outcome, duration, replayed) that opens to the result. */
  function renderCall(call) {
    const finished = call.outcome !== undefined && call.outcome !== null;
    const outcome = finished ? call.outcome : "running…";
    const kind = !finished ? "running" : call.outcome === "ok" ? "ok" : "error";
    const summary = el(
      "summary",
      {},
      el("code", { class: "call-name" }, call.name),
      el("code", { class: "call-args" }, compact(call.arguments ?? {})),
      el("span", { class: `badge outcome-${kind}`, "data-outcome": outcome }, outcome),
      finished ? el("span", { class: "duration" }, tw.formatDuration(call.duration_ms)) : null,
      call.replayed
        ? el("span", { class: "badge replayed", title: "Not executed again: the stored result" }, "replayed")
        : null,
    );
    const body = el(
      "div",
      { class: "call-body" },
      el("h3", {}, "Arguments"),
      el("pre", { class: "call-arguments" }, tw.pretty(call.arguments ?? {})),
      el("h3", {}, "Result"),
      finished
        ? el("pre", { class: "call-result" }, tw.pretty(call.result))
        : el("p", { class: "hint" }, "Still running…"),
    );
    return el(
      "li",
      { class: "call", "data-state": kind, "data-call-id": call.call_id || "" },
      el("details", {}, summary, body),
    );
  }

  function renderMessage(message) {
    if (message.role === "user") {
      return el(
        "li",
        { class: "message user" },
        el("div", { class: "who" }, "You"),
        el("div", { class: "text" }, message.text),
      );
    }
    const calls = el(
      "ul",
      { class: "calls", "aria-label": "Tool calls" },
      ...(message.calls || []).map(renderCall),
    );
    calls.hidden = !(message.calls || []).length;
    const node = el(
      "li",
      { class: "message assistant", "data-state": message.state || "done" },
      el("div", { class: "who" }, "Assistant"),
      el("div", { class: "text" }, message.text || ""),
      calls,
    );
    if (message.error) node.append(el("p", { class: "error-box", role: "alert" }, message.error));
    return node;
  }

  function renderAll() {
    transcript.replaceChildren(...state.messages.map(renderMessage));
    byId("chat-empty").hidden = state.messages.length > 0;
  }

  /** The events of a text/event-stream body, as {event, data} with data parsed from JSON. */
  async function* events(response) {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let name = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith(":")) continue; // a keep-alive comment
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") name = text;
          else if (field === "data") data.push(text);
        }
        if (data.length) yield { event: name, data: JSON.parse(data.join("\n")) };
      }
    }
  }

  function scrollToEnd() {
    const last = transcript.lastElementChild;
    if (last) last.scrollIntoView({ block: "end" });
  }

  async function ask(text) {
    const answer = { role: "assistant", text: "", calls: [], state: "streaming" };
    state.messages.push({ role: "user", text }, answer);
    renderAll();
    const node = transcript.lastElementChild;
    node.setAttribute("aria-busy", "true");
    const textNode = node.querySelector(".text");
    const callList = node.querySelector(".calls");
    const callNodes = new Map();
    let resumed = false;

    const showCall = (call) => {
      const fresh = renderCall(call);
      const previous = callNodes.get(call.call_id);
      // Keep a call the reader opened open while it finishes.
      if (previous && previous.querySelector("details").open) fresh.querySelector("details").open = true;
      if (previous) previous.replaceWith(fresh);
      else callList.append(fresh);
      callNodes.set(call.call_id, fresh);
      callList.hidden = false;
    };

    const body = {
      messages: [{ role: "user", content: text }],
      request_id: tw.randomId("web-"),
      stream: true,
    };
    if (state.conversation_id) body.conversation_id = state.conversation_id;
    try {
      const response = await tw.request("POST", "/v1/chat", body, { accept: "text/event-stream" });
      for await (const { event, data } of events(response)) {
        if (event === "text.delta") {
          // Text of a later round (after its calls) starts a paragraph of its own.
          if (resumed && answer.text) answer.text += "\n\n";
          resumed = false;
          answer.text += data.text;
          textNode.textContent = answer.text;
        } else if (event === "call.proposed") {
          const call = { call_id: data.call_id, name: data.name, arguments: data.arguments };
          answer.calls.push(call);
          showCall(call);
          resumed = true;
        } else if (event === "call.finished") {
          const index = answer.calls.findIndex((c) => c.call_id === data.call_id);
          if (index >= 0) answer.calls[index] = data;
          else answer.calls.push(data);
          showCall(data);
        } else if (event === "done") {
          state.conversation_id = data.conversation_id || state.conversation_id;
          answer.text = data.answer || answer.text;
          answer.calls = data.calls || answer.calls;
          answer.state = "done";
        } else if (event === "error") {
          throw new tw.ApiFailure(data.error?.message || "The run failed; send the message again.", {
            code: data.error?.code,
          });
        }
        scrollToEnd();
      }
      if (answer.state !== "done") {
        throw new tw.ApiFailure("The answer was cut off before it finished; send the message again.");
      }
    } catch (error) {
      answer.state = "error";
      answer.error =
        error instanceof tw.ApiFailure
          ? error.message
          : "The answer could not be read; send the message again.";
    } finally {
      save();
      const fresh = renderMessage(answer);
      // Calls the reader opened while the answer streamed stay open.
      for (const call of node.querySelectorAll(".call")) {
        if (!call.querySelector("details").open) continue;
        const id = CSS.escape(call.getAttribute("data-call-id"));
        const match = fresh.querySelector(`.call[data-call-id="${id}"] details`);
        if (match) match.open = true;
      }
      node.replaceWith(fresh);
      scrollToEnd();
    }
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text || running) return;
    input.value = "";
    send.disabled = true;
    running = ask(text);
    try {
      await running;
    } finally {
      running = null;
      send.disabled = false;
      input.focus();
    }
  });

  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  byId("new-conversation").addEventListener("click", () => {
    if (running) return;
    state = { conversation_id: null, messages: [] };
    save();
    renderAll();
    input.focus();
  });

  renderAll();
  scrollToEnd();
  input.focus();
})();
