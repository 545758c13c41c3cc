// The audit page: the tool calls of the administrator's tenant from GET /admin/api/audit, newest
// first. The filters (user, tool, outcome, since) are a plain GET form, so they sit in the page's
// address, can be bookmarked, and survive a reload; the page reads them back from there.
"use strict";

(() => {
  const tw = window.toolwire;
  if (!tw || !tw.ready || document.body.dataset.section !== "audit") return;
  const { api, el, byId, say } = tw;

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
    const [users, functions] = await Promise.allSettled([
      api("GET", "/admin/api/users"),
      api("GET", "/admin/api/functions"),
    ]);
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
      byId("f-tool-names").replaceChildren(
        ...functions.value.data.map((f) => el("option", { value: f.name })),
      );
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
    tw.fillTable(
      "audit",
      records.map((r) =>
        el(
          "tr",
          {},
          el("td", {}, el("time", { datetime: r.at }, new Date(r.at).toLocaleString())),
          el("td", {}, names.get(r.user_id) || r.user_id),
          el("td", {}, el("code", {}, r.tool)),
          el(
            "td",
            {},
            el("span", { class: `badge outcome-${r.outcome === "ok" ? "ok" : "error"}` }, r.outcome),
          ),
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

  audit().catch((error) => {
    byId("audit-loading")?.remove();
    say(
      "page-error",
      error instanceof tw.ApiFailure
        ? error.message
        : "Something went wrong in this page; reload it and try again.",
    );
  });
})();
