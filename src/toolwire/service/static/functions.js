// The functions pages: the list with the OpenAPI import, and one function's form (name,
// description, connection, JSON definition edited as text), its Test panel and its deletion. A
// refused save keeps what was typed and shows each problem next to its field.
"use strict";

(() => {
  const tw = window.toolwire;
  if (!tw || !tw.ready || !tw.admin) return;
  const { api, el, byId, say } = tw;
  const { busy, clearErrors, connectionOptions, fieldError, message, page, path, setupDelete, showRefusal } =
    tw.admin;

  const DEFINITION_KEYS = ["strict", "parameters", "http_request_body", "method", "path"];

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
    tw.fillTable("functions", functions.data.map(functionRow));
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
        fieldError(
          "import-document",
          `This is not valid JSON (${error.message}); paste the OpenAPI document as JSON.`,
        ).focus();
        return;
      }
      const connection = byId("import-connection").value;
      if (!connection) {
        fieldError(
          "import-connection",
          "Choose the connection the functions will use; add one first if there is none.",
        ).focus();
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
        const lines = [
          el(
            "p",
            {},
            result.functions.length
              ? `Imported ${result.functions.length} function(s): ${names}.`
              : "Nothing was imported.",
          ),
        ];
        if (result.skipped.length) {
          lines.push(
            el("p", {}, "Left out:"),
            el("ul", {}, ...result.skipped.map((s) => el("li", {}, `${s.where}: ${s.why}`))),
          );
        }
        const box = byId("import-result");
        box.replaceChildren(...lines);
        box.hidden = false;
        const functions = await api("GET", "/admin/api/functions");
        tw.fillTable("functions", functions.data.map(functionRow));
      } catch (error) {
        if (!(error instanceof tw.ApiFailure)) throw error;
        showRefusal(form, error, (param) =>
          param && param.startsWith("document")
            ? "import-document"
            : param === "connection"
              ? "import-connection"
              : null,
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
      example[name] =
        Array.isArray(schema.enum) && schema.enum.length ? schema.enum[0] : (kinds[schema.type] ?? "");
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
      if (!body.description)
        missing.push(fieldError("fn-description", "Say what the function does and when to use it."));
      if (!body.connection)
        missing.push(fieldError("fn-connection", "Choose a connection; add one first if there is none."));
      try {
        body.definition = JSON.parse(definition.value);
        if (!body.definition || typeof body.definition !== "object" || Array.isArray(body.definition)) {
          missing.push(
            fieldError("fn-definition", 'The definition must be a JSON object: { "parameters": { ... } }.'),
          );
        }
      } catch (error) {
        missing.push(
          fieldError("fn-definition", `This is not valid JSON (${error.message}); fix it and save again.`),
        );
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
          return where && where !== "definition" && functionField(param) === "fn-definition"
            ? `${where}: ${text}`
            : text;
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
        fieldError(
          "test-arguments",
          `This is not valid JSON (${error.message}); give the arguments as a JSON object.`,
        ).focus();
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
      ? el(
          "p",
          { class: "test-outcome ok" },
          el("span", { class: "badge outcome-ok" }, "ok"),
          ` The API answered ${status}.`,
        )
      : el(
          "p",
          { class: "test-outcome error", role: "alert" },
          el("span", { class: "badge outcome-error" }, result.error?.code || "failed"),
          ` ${result.error?.message || `The API answered ${status}.`}`,
        );
    const parts = [outcome];
    if (result.request) {
      const request = result.request;
      const lines = [
        `${request.method} ${request.url}`,
        ...Object.entries(request.headers).map(([k, v]) => `${k}: ${v}`),
      ];
      if (request.body !== null && request.body !== undefined) lines.push("", tw.pretty(request.body));
      parts.push(el("h3", {}, "Request sent"), el("pre", { id: "test-request" }, lines.join("\n")));
    } else {
      parts.push(el("p", { class: "hint" }, "Nothing was sent."));
    }
    const head = status === null ? "No answer" : `HTTP ${status}`;
    parts.push(
      el("h3", {}, "Response"),
      el("pre", { id: "test-response" }, `${head}\n\n${tw.pretty(result.response.body)}`),
    );
    return parts;
  }

  tw.admin.start(byId("function-page") ? functionEdit : functionsList);
})();
