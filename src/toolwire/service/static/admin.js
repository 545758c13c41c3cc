// The admin pages: functions (list, OpenAPI import, edit, test, delete), connections (list, edit,
// delete) and the audit log, all on the admin JSON API under /admin/api. A refused save keeps what
// was typed and shows each problem next to its field (the server names the field in `param`, and
// for a definition lists every problem with its JSON path). Credentials are write-only: a stored
// one is shown as "set", never filled into a field.
"use strict";

(() => {
  const tw = window.toolwire;
  if (!tw || !tw.ready) return;
  const { api, el, byId, say } = tw;

  const DEFINITION_KEYS = ["strict", "parameters", "http_request_body", "method", "path"];
  const SECRET_KEYS = {
    none: null,
    api_key_header: "api_key",
    api_key_query: "api_key",
    basic: "password",
    bearer: "token",
    oauth2_client_credentials: "client_secret",
  };
  const SECRET_LABELS = { api_key: "API key", password: "Password", token: "Token", client_secret: "Client secret" };
  const AUTH_LABELS = {
    none: "None",
    api_key_header: "API key in a header",
    api_key_query: "API key in the query",
    basic: "Basic auth",
    bearer: "Bearer token",
    oauth2_client_credentials: "OAuth2 client credentials",
  };

  const path = (kind, name) => `/admin/api/${kind}/${encodeURIComponent(name)}`;
  const page = (kind, name) => `/admin/${kind}/${encodeURIComponent(name)}`;
  const message = (error) => (error instanceof tw.ApiFailure ? error.message : "Something went wrong in this page; reload it and try again.");

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
    const problems = listed ? error.problems : error.param ? [{ param: error.param, message: error.message }] : [];
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
    byId("delete-start").addEventListener("click", () => {
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

  function table(id, rows) {
    byId(`${id}-loading`)?.remove();
    byId(`${id}-rows`).replaceChildren(...rows);
    byId(`${id}-table`).hidden = rows.length === 0;
    byId(`${id}-empty`).hidden = rows.length > 0;
  }

  function connectionOptions(select, connections, selected) {
    const options = connections.map((c) => el("option", { value: c.name, selected: c.name === selected }, c.name));
    if (!connections.length) options.push(el("option", { value: "", disabled: true, selected: true }, "No connections yet"));
    select.replaceChildren(...options);
  }

  // --- functions -------------------------------------------------------------------------------

  function functionRow(f) {
    return el(
      "tr",
      {},
      el("th", { scope: "row" }, el("a", { href: page("functions", f.name) }, f.name)),
      el("td", { class: "description" }, f.description),
      el("td", {}, el("a", { href: page("connections", f.connection) }, f.connection)),
      el("td", {}, el("code", { class: "request" }, `${f.request.method} ${f.request.url}`)),
    );
  }

  async function functionsList() {
    const importPanel = byId("import");
    const openImport = () => {
      importPanel.open = true;
      byId("import-connection").focus();
    };
    byId("empty-import").addEventListener("click", openImport);
    if (location.hash === "#import") importPanel.open = true;
    const [functions, connections] = await Promise.all([
      api("GET", "/admin/api/functions"),
      api("GET", "/admin/api/connections"),
    ]);
    table("functions", functions.data.map(functionRow));
    connectionOptions(byId("import-connection"), connections.data, null);
    setupImport();
  }

  function setupImport() {
    const form = byId("import-form");
    const documentField = byId("import-document");
    byId("import-file").addEventListener("change", async (event) => {
      const file = event.target.files[0];
      if (file) documentField.value = await file.text();
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      clearErrors(form);
      say("import-result", "");
      let document;
      try {
        document = JSON.parse(documentField.value);
      } catch (error) {
        fieldError("import-document", `This is not valid JSON (${error.message}); paste the OpenAPI document as JSON.`).focus();
        return;
      }
      const connection = byId("import-connection").value;
      if (!connection) {
        fieldError("import-connection", "Choose the connection the functions will use; add one first if there is none.").focus();
        return;
      }
      const button = form.querySelector("button[type=submit]");
      busy(button, true);
      try {
        const result = await api("POST", "/admin/api/functions/import-openapi", {
          connection,
          document,
          replace: byId("import-replace").checked,
        });
        const names = result.functions.map((f) => f.name).join(", ");
        const lines = [el("p", {}, result.functions.length ? `Imported ${result.functions.length} function(s): ${names}.` : "Nothing was imported.")];
        if (result.skipped.length) {
          lines.push(el("p", {}, "Left out:"), el("ul", {}, ...result.skipped.map((s) => el("li", {}, `${s.where}: ${s.why}`))));
        }
        const box = byId("import-result");
        box.replaceChildren(...lines);
        box.hidden = false;
        const functions = await api("GET", "/admin/api/functions");
        table("functions", functions.data.map(functionRow));
      } catch (error) {
        if (!(error instanceof tw.ApiFailure)) throw error;
        showRefusal(form, error, (param) =>
          param && param.startsWith("document") ? "import-document" : param === "connection" ? "import-connection" : null,
        );
      } finally {
        busy(button, false);
      }
    });
  }

  const NEW_DEFINITION = {
    strict: false,
    parameters: { type: "object", required: [], properties: {}, additionalProperties: false },
  };

  function functionField(param) {
    if (!param) return null;
    const head = param.split(/[.[]/)[0];
    if (["name", "description", "connection"].includes(head)) return `fn-${head}`;
    if (head === "definition" || DEFINITION_KEYS.includes(head)) return "fn-definition";
    return null;
  }

  /** Example arguments from a parameters schema: each required property with a value of its type. */
  function exampleArguments(parameters) {
    const properties = (parameters && parameters.properties) || {};
    const example = {};
    for (const name of (parameters && parameters.required) || []) {
      const schema = properties[name] || {};
      const kinds = { string: "", integer: 0, number: 0, boolean: false, array: [], object: {} };
      example[name] = Array.isArray(schema.enum) && schema.enum.length ? schema.enum[0] : kinds[schema.type] ?? "";
    }
    return example;
  }

  async function functionEdit() {
    const name = byId("function-page").dataset.name;
    const form = byId("function-form");
    const definition = byId("fn-definition");
    const connections = await api("GET", "/admin/api/connections");
    byId("no-connections").hidden = connections.data.length > 0;
    let current = null;
    if (name) {
      current = await api("GET", path("functions", name));
      byId("fn-name").value = current.name;
      byId("fn-description").value = current.description;
      definition.value = JSON.stringify(current.definition, null, 2);
      say("fn-request", `Calls send: ${current.request.method} ${current.request.url}`);
      byId("test-arguments").value = JSON.stringify(exampleArguments(current.definition.parameters), null, 2);
      setupTest(name);
      setupDelete("functions", name, "Function");
    } else {
      definition.value = JSON.stringify(NEW_DEFINITION, null, 2);
    }
    connectionOptions(byId("fn-connection"), connections.data, current ? current.connection : null);

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      clearErrors(form);
      say("form-error", "");
      const body = {
        name: byId("fn-name").value.trim(),
        description: byId("fn-description").value.trim(),
        connection: byId("fn-connection").value,
        definition: null,
      };
      const missing = [];
      if (!body.name) missing.push(fieldError("fn-name", "Give the function a name, e.g. create_ticket."));
      if (!body.description) missing.push(fieldError("fn-description", "Say what the function does and when to use it."));
      if (!body.connection) missing.push(fieldError("fn-connection", "Choose a connection; add one first if there is none."));
      try {
        body.definition = JSON.parse(definition.value);
        if (!body.definition || typeof body.definition !== "object" || Array.isArray(body.definition)) {
          missing.push(fieldError("fn-definition", 'The definition must be a JSON object: { "parameters": { ... } }.'));
        }
      } catch (error) {
        missing.push(fieldError("fn-definition", `This is not valid JSON (${error.message}); fix it and save again.`));
      }
      if (missing.length) {
        say("form-error", "Nothing was saved; fix the fields marked above.");
        missing[0].focus();
        return;
      }
      const button = byId("fn-save");
      busy(button, true);
      try {
        const saved = name
          ? await api("PUT", path("functions", name), body)
          : await api("POST", "/admin/api/functions", body);
        tw.flash(`Function ${saved.name} was saved.`);
        location.assign(page("functions", saved.name));
      } catch (error) {
        if (!(error instanceof tw.ApiFailure)) throw error;
        showRefusal(form, error, functionField, (param, text) => {
          const where = param && param.startsWith("definition.") ? param.slice("definition.".length) : param;
          return where && where !== "definition" && functionField(param) === "fn-definition" ? `${where}: ${text}` : text;
        });
      } finally {
        busy(button, false);
      }
    });
  }

  function setupTest(name) {
    const form = byId("test-form");
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      clearErrors(form);
      let args;
      try {
        args = JSON.parse(byId("test-arguments").value || "{}");
      } catch (error) {
        fieldError("test-arguments", `This is not valid JSON (${error.message}); give the arguments as a JSON object.`).focus();
        return;
      }
      const button = byId("test-run");
      busy(button, true);
      const box = byId("test-result");
      try {
        const result = await api("POST", `${path("functions", name)}/test`, { arguments: args });
        box.replaceChildren(...testResult(result));
      } catch (error) {
        box.replaceChildren(el("p", { class: "error-box", role: "alert" }, message(error)));
      } finally {
        box.hidden = false;
        busy(button, false);
      }
    });
  }

  function testResult(result) {
    const status = result.response.status;
    const outcome = result.ok
      ? el("p", { class: "test-outcome ok" }, el("span", { class: "badge outcome-ok" }, "ok"), ` The API answered ${status}.`)
      : el(
          "p",
          { class: "test-outcome error", role: "alert" },
          el("span", { class: "badge outcome-error" }, result.error?.code || "failed"),
          ` ${result.error?.message || `The API answered ${status}.`}`,
        );
    const parts = [outcome];
    if (result.request) {
      const request = result.request;
      const lines = [`${request.method} ${request.url}`, ...Object.entries(request.headers).map(([k, v]) => `${k}: ${v}`)];
      if (request.body !== null && request.body !== undefined) lines.push("", tw.pretty(request.body));
      parts.push(el("h3", {}, "Request sent"), el("pre", { id: "test-request" }, lines.join("\n")));
    } else {
      parts.push(el("p", { class: "hint" }, "Nothing was sent."));
    }
    const head = status === null ? "No answer" : `HTTP ${status}`;
    parts.push(el("h3", {}, "Response"), el("pre", { id: "test-response" }, `${head}\n\n${tw.pretty(result.response.body)}`));
    return parts;
  }

  // --- connections -----------------------------------------------------------------------------

  async function connectionsList() {
    const connections = await api("GET", "/admin/api/connections");
    table(
      "connections",
      connections.data.map((c) => {
        const secret = SECRET_KEYS[c.auth.type];
        const credential = !secret
          ? el("span", { class: "muted" }, "none needed")
          : c.secrets_set.includes(secret)
            ? el("span", { class: "badge outcome-ok" }, "set")
            : el("span", { class: "badge outcome-error" }, "not set");
        return el(
          "tr",
          {},
          el("th", { scope: "row" }, el("a", { href: page("connections", c.name) }, c.name)),
          el("td", {}, el("code", { class: "request" }, `${c.method} ${c.url}`)),
          el("td", {}, AUTH_LABELS[c.auth.type] || c.auth.type),
          el("td", {}, credential),
          el("td", {}, c.functions.length ? c.functions.join(", ") : el("span", { class: "muted" }, "none")),
        );
      }),
    );
  }

  function connectionField(param) {
    if (!param) return null;
    if (["name", "url", "method", "timeout"].includes(param)) return `cn-${param}`;
    if (!param.startsWith("auth")) return null;
    const rest = param.split(".")[1] || "";
    if (rest === "type") return "cn-auth-type";
    if (rest === "secrets" || Object.values(SECRET_KEYS).includes(rest)) return "cn-secret";
    return byId(`cn-${rest}`) ? `cn-${rest}` : "cn-auth-type";
  }

  async function connectionEdit() {
    const name = byId("connection-page").dataset.name;
    const form = byId("connection-form");
    const type = byId("cn-auth-type");
    const secret = byId("cn-secret");
    let stored = null;

    const showAuth = () => {
      const chosen = type.value;
      for (const field of form.querySelectorAll("[data-auth]")) {
        const wanted = field.dataset.auth;
        field.hidden = wanted === "secret" ? !SECRET_KEYS[chosen] : wanted !== chosen;
      }
      const key = SECRET_KEYS[chosen];
      if (!key) return;
      byId("cn-secret-label").textContent = SECRET_LABELS[key];
      const isSet = stored && stored.auth.type === chosen && stored.secrets_set.includes(key);
      secret.placeholder = isSet ? "•••••••• (set; leave empty to keep it)" : "";
      byId("cn-secret-status").textContent = isSet
        ? `A ${SECRET_LABELS[key].toLowerCase()} is set. It is never shown; leave this empty to keep it, or type a new one to replace it.`
        : `No ${SECRET_LABELS[key].toLowerCase()} is set yet.`;
      byId("cn-secret-status").dataset.secretSet = isSet ? "true" : "false";
    };
    type.addEventListener("change", showAuth);

    if (name) {
      stored = await api("GET", path("connections", name));
      byId("cn-name").value = stored.name;
      byId("cn-url").value = stored.url;
      byId("cn-method").value = stored.method;
      byId("cn-timeout").value = stored.timeout;
      type.value = stored.auth.type;
      for (const field of ["header_name", "query_name", "username", "token_url", "client_id", "token_auth_method"]) {
        if (stored.auth[field]) byId(`cn-${field}`).value = stored.auth[field];
      }
      byId("cn-scopes").value = (stored.auth.scopes || []).join(" ");
      const list = byId("cn-functions");
      list.replaceChildren(...stored.functions.map((f) => el("li", {}, el("a", { href: page("functions", f) }, f))));
      byId("cn-functions-empty").hidden = stored.functions.length > 0;
      setupDelete("connections", name, "Connection");
    }
    showAuth();

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      clearErrors(form);
      say("form-error", "");
      const chosen = type.value;
      const auth = { type: chosen };
      const fields = {
        api_key_header: ["header_name"],
        api_key_query: ["query_name"],
        basic: ["username"],
        oauth2_client_credentials: ["token_url", "client_id", "token_auth_method"],
      };
      for (const field of fields[chosen] || []) {
        const value = byId(`cn-${field}`).value.trim();
        if (value) auth[field] = value;
      }
      if (chosen === "oauth2_client_credentials") auth.scopes = byId("cn-scopes").value.split(/\s+/).filter(Boolean);
      const key = SECRET_KEYS[chosen];
      auth.secrets = key && secret.value ? { [key]: secret.value } : {};
      const timeout = Number.parseFloat(byId("cn-timeout").value);
      const body = {
        name: byId("cn-name").value.trim(),
        url: byId("cn-url").value.trim(),
        method: byId("cn-method").value,
        timeout: Number.isFinite(timeout) ? timeout : 10,
        auth,
      };
      const missing = [];
      if (!body.name) missing.push(fieldError("cn-name", "Give the connection a name, e.g. tickets."));
      if (!body.url) missing.push(fieldError("cn-url", "Give the API's URL, e.g. https://api.example.com/v1."));
      if (!Number.isFinite(timeout)) missing.push(fieldError("cn-timeout", "Give the timeout in seconds, e.g. 10."));
      if (missing.length) {
        say("form-error", "Nothing was saved; fix the fields marked above.");
        missing[0].focus();
        return;
      }
      const button = byId("cn-save");
      busy(button, true);
      try {
        const saved = name
          ? await api("PUT", path("connections", name), body)
          : await api("POST", "/admin/api/connections", body);
        secret.value = "";
        tw.flash(`Connection ${saved.name} was saved.`);
        location.assign(page("connections", saved.name));
      } catch (error) {
        if (!(error instanceof tw.ApiFailure)) throw error;
        showRefusal(form, error, connectionField);
      } finally {
        busy(button, false);
      }
    });
  }

  // --- audit -----------------------------------------------------------------------------------

  const AUDIT_LIMIT = 200;

  async function audit() {
    const query = new URLSearchParams(location.search);
    const filters = {};
    for (const name of ["user_id", "tool", "outcome", "since"]) {
      const value = (query.get(name) || "").trim();
      if (value) filters[name] = value;
    }
    byId("f-tool").value = filters.tool || "";
    byId("f-outcome").value = filters.outcome || "";
    byId("f-since").value = filters.since || "";

    const names = new Map();
    const [users, functions] = await Promise.allSettled([api("GET", "/admin/api/users"), api("GET", "/admin/api/functions")]);
    const userSelect = byId("f-user");
    if (users.status === "fulfilled") {
      for (const user of users.value.data) {
        names.set(user.id, user.name);
        userSelect.append(el("option", { value: user.id, selected: user.id === filters.user_id }, user.name));
      }
    }
    if (filters.user_id && !names.has(filters.user_id)) {
      userSelect.append(el("option", { value: filters.user_id, selected: true }, filters.user_id));
    }
    if (functions.status === "fulfilled") {
      byId("f-tool-names").replaceChildren(...functions.value.data.map((f) => el("option", { value: f.name })));
    }

    const params = new URLSearchParams({ limit: String(AUDIT_LIMIT) });
    for (const name of ["user_id", "tool", "outcome"]) if (filters[name]) params.set(name, filters[name]);
    if (filters.since) {
      const since = new Date(filters.since);
      if (Number.isNaN(since.getTime())) {
        byId("audit-loading").remove();
        say("page-error", "The 'since' filter is not a date and time; pick one, or clear the filters.");
        return;
      }
      params.set("since", since.toISOString());
    }
    const records = (await api("GET", `/admin/api/audit?${params}`)).data;
    table(
      "audit",
      records.map((r) =>
        el(
          "tr",
          {},
          el("td", {}, el("time", { datetime: r.at }, new Date(r.at).toLocaleString())),
          el("td", {}, names.get(r.user_id) || r.user_id),
          el("td", {}, el("code", {}, r.tool)),
          el("td", {}, el("span", { class: `badge outcome-${r.outcome === "ok" ? "ok" : "error"}` }, r.outcome)),
          el("td", { class: "number" }, tw.formatDuration(r.duration_ms)),
          el("td", {}, r.replayed ? el("span", { class: "badge replayed" }, "replayed") : ""),
          el("td", {}, el("code", { class: "request-id" }, r.request_id)),
        ),
      ),
    );
    const filtered = Object.keys(filters).length > 0;
    say(
      "audit-empty",
      filtered
        ? "No calls match these filters — change or clear them."
        : "No tool calls yet — they appear here once the assistant calls a function.",
    );
    byId("audit-empty").hidden = records.length > 0;
    say(
      "audit-count",
      records.length === 0
        ? ""
        : records.length >= AUDIT_LIMIT
          ? `Showing the latest ${AUDIT_LIMIT} calls; narrow the filters to see older ones.`
          : `${records.length} call${records.length === 1 ? "" : "s"}, newest first.`,
    );
  }

  // --- start -----------------------------------------------------------------------------------

  const pages = {
    functions: () => (byId("function-page") ? functionEdit() : functionsList()),
    connections: () => (byId("connection-page") ? connectionEdit() : connectionsList()),
    audit,
  };
  const start = pages[document.body.dataset.section];
  if (start) {
    start().catch((error) => {
      for (const loading of document.querySelectorAll(".loading")) loading.remove();
      say("page-error", message(error));
    });
  }
})();
