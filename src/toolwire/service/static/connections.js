// The connections pages: the list, and one connection's form with its authentication. Credentials
// are write-only: a stored one is shown as "set", never filled into a field; leaving the field
// empty keeps it.
"use strict";

(() => {
  const tw = window.toolwire;
  if (!tw || !tw.ready || !tw.admin) return;
  const { api, el, byId, say } = tw;
  const { busy, clearErrors, fieldError, page, path, setupDelete, showRefusal } = tw.admin;

  const SECRET_KEYS = {
    none: null,
    api_key_header: "api_key",
    api_key_query: "api_key",
    basic: "password",
    bearer: "token",
    oauth2_client_credentials: "client_secret",
  };
  const SECRET_LABELS = {
    api_key: "API key",
    password: "Password",
    token: "Token",
    client_secret: "Client secret",
  };
  const AUTH_LABELS = {
    none: "None",
    api_key_header: "API key in a header",
    api_key_query: "API key in the query",
    basic: "Basic auth",
    bearer: "Bearer token",
    oauth2_client_credentials: "OAuth2 client credentials",
  };

  async function connectionsList() {
    const connections = await api("GET", "/admin/api/connections");
    tw.fillTable(
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
      for (const field of [
        "header_name",
        "query_name",
        "username",
        "token_url",
        "client_id",
        "token_auth_method",
      ]) {
        if (stored.auth[field]) byId(`cn-${field}`).value = stored.auth[field];
      }
      byId("cn-scopes").value = (stored.auth.scopes || []).join(" ");
      const list = byId("cn-functions");
      list.replaceChildren(
        ...stored.functions.map((f) => el("li", {}, el("a", { href: page("functions", f) }, f))),
      );
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
      if (chosen === "oauth2_client_credentials")
        auth.scopes = byId("cn-scopes").value.split(/\s+/).filter(Boolean);
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
      if (!body.url)
        missing.push(fieldError("cn-url", "Give the API's URL, e.g. https://api.example.com/v1."));
      if (!Number.isFinite(timeout))
        missing.push(fieldError("cn-timeout", "Give the timeout in seconds, e.g. 10."));
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

  tw.admin.start(byId("connection-page") ? connectionEdit : connectionsList);
})();
