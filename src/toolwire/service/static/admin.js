// What the admin pages share: field errors, a refusal placed next to the fields it names (the server
// names the field in `param`, and for a definition lists every problem with its JSON path), the
// delete confirmation, and how each page starts. The pages themselves are in functions.js and
// connections.js; they find these as `toolwire.admin`.
"use strict";

(() => {
  const tw = window.toolwire;
  if (!tw || !tw.ready) return;
  const { api, el, byId, say } = tw;

  const path = (kind, name) => `/admin/api/${kind}/${encodeURIComponent(name)}`;
  const page = (kind, name) => `/admin/${kind}/${encodeURIComponent(name)}`;
  const message = (error) =>
    error instanceof tw.ApiFailure
      ? error.message
      : "Something went wrong in this page; reload it and try again.";

  // --- field errors ----------------------------------------------------------------------------

  function clearErrors(form) {
    for (const box of form.querySelectorAll(".field-error")) say(box, "");
    for (const field of form.querySelectorAll("[aria-invalid]")) field.removeAttribute("aria-invalid");
  }

  /** Show messages under the field with this id; returns the field. */
  function fieldError(id, messages) {
    const box = byId(`${id}-error`);
    const field = byId(id);
    if (!box || !field) return null;
    const list = Array.isArray(messages) ? messages : [messages];
    box.replaceChildren(list.length > 1 ? el("ul", {}, ...list.map((m) => el("li", {}, m))) : list[0]);
    box.hidden = false;
    field.setAttribute("aria-invalid", "true");
    return field;
  }

  /**
   * Place a refusal next to its fields: each listed problem (or the one `param`) goes under the
   * field `fieldOf(param)` names. The server's sentence goes above the buttons, unless one field took it whole.
   */
  function showRefusal(form, error, fieldOf, label = (param, text) => text) {
    clearErrors(form);
    const listed = Array.isArray(error.problems) && error.problems.length > 0;
    const problems = listed
      ? error.problems
      : error.param
        ? [{ param: error.param, message: error.message }]
        : [];
    const grouped = new Map();
    for (const problem of problems) {
      const id = fieldOf(problem.param);
      if (!id) continue;
      if (!grouped.has(id)) grouped.set(id, []);
      grouped.get(id).push(listed ? label(problem.param, problem.message) : problem.message);
    }
    let first = null;
    for (const [id, messages] of grouped) first = first || fieldError(id, messages);
    say(form.querySelector(".error-box"), !listed && grouped.size > 0 ? "" : error.message);
    if (first) first.focus();
  }

  function busy(button, on) {
    button.disabled = on;
    button.setAttribute("aria-busy", on ? "true" : "false");
  }

  function setupDelete(kind, name, noun) {
    const ask = byId("delete-ask");
    const confirm = byId("delete-confirm");
    if (!ask || !confirm) return;
    const start = byId("delete-start");
    // Enabled only now: a click before the page has loaded the item would do nothing.
    start.disabled = false;
    start.addEventListener("click", () => {
      ask.hidden = true;
      confirm.hidden = false;
      byId("delete-no").focus();
    });
    byId("delete-no").addEventListener("click", () => {
      confirm.hidden = true;
      ask.hidden = false;
      byId("delete-start").focus();
    });
    byId("delete-yes").addEventListener("click", async () => {
      say("delete-error", "");
      try {
        await api("DELETE", path(kind, name));
        tw.flash(`${noun} ${name} was deleted.`);
        location.assign(`/admin/${kind}`);
      } catch (error) {
        confirm.hidden = true;
        ask.hidden = false;
        say("delete-error", message(error));
      }
    });
  }

  function connectionOptions(select, connections, selected) {
    const options = connections.map((c) =>
      el("option", { value: c.name, selected: c.name === selected }, c.name),
    );
    if (!connections.length)
      options.push(el("option", { value: "", disabled: true, selected: true }, "No connections yet"));
    select.replaceChildren(...options);
  }

  /** Run a page's start; a failure to load shows its sentence instead of the page's content. */
  function start(run) {
    run().catch((error) => {
      for (const loading of document.querySelectorAll(".loading")) loading.remove();
      say("page-error", message(error));
    });
  }

  tw.admin = {
    busy,
    clearErrors,
    connectionOptions,
    fieldError,
    message,
    page,
    path,
    setupDelete,
    showRefusal,
    start,
  };
})();
