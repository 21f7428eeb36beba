// The AgentRunner console: hash routes (#/chat, #/runs, #/runs/<id>, #/runners, #/runtimes, #/runtimes/<id>)
// over the host's JSON
// and Server-Sent Events API (console/app.py). No build step; every text from a run is set as text,
// never as HTML.

const view = document.getElementById("view");
let leave = () => {}; // stops the current page's streams and timers

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// The session (GET /api/session): {auth: "open"} on an open console; on a secured host the signed-in
// client and the CSRF token every request carries (state-changing ones need it; console/sessions.py).
let session = null;
class SignInNeeded extends Error {}
const headers = () => ({ "content-type": "application/json", "x-csrf-token": (session && session.csrf_token) || "" });

// A 401 means the session is gone (or never was): back to the sign-in form.
function signedOut(data) {
  session = null;
  info = null;
  renderSignIn(data.message || "");
  return new SignInNeeded(data.message || "sign in");
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers() });
  const data = await response.json().catch(() => ({}));
  if (response.status === 401) throw signedOut(data);
  if (!response.ok) throw new Error(`${data.error || response.status}: ${data.message || response.statusText}`);
  return data;
}

// An SSE stream read with fetch (works for POST, unlike EventSource). Calls onEvent(data) per event.
async function stream(path, options, onEvent, signal) {
  const response = await fetch(path, { ...options, signal, headers: headers() });
  if (!response.ok) {
    const data = await response.json().catch(() => ({}));
    if (response.status === 401) throw signedOut(data);
    onEvent({ type: "error", reason: data.error || String(response.status), message: data.message || "" });
    return;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (data) onEvent(JSON.parse(data));
    }
  }
}

const fmtTime = (iso) => (iso ? new Date(iso).toLocaleString() : "-");
const usageText = (u) =>
  u && Object.keys(u).length
    ? Object.entries(u).filter(([k]) => k !== "extra").map(([k, v]) => `${k.replace("_tokens", "")} ${v}`).join(", ")
    : "-";
const badge = (status) => el("span", { class: `badge ${status}`, "data-testid": "status" }, status);

function duration(run) {
  if (!run.create_time || !run.finish_time) return "-";
  return `${((new Date(run.finish_time) - new Date(run.create_time)) / 1000).toFixed(1)} s`;
}

// ---------------------------------------------------------------------------------------------- chat
const chatState = { conversation: `console-${Math.random().toString(36).slice(2, 8)}`, agent: "" };

function renderChat(info) {
  const transcript = el("div", { id: "transcript", "data-testid": "transcript" });
  const input = el("textarea", { id: "chat-input", placeholder: "Message (Enter sends, Shift+Enter: new line)" });
  const status = el("div", { id: "chat-status", class: "meta", "data-testid": "chat-status" });
  const cancel = el("button", { id: "cancel", class: "danger", hidden: true }, "Cancel run");
  const agent = el("select", { id: "agent" },
    el("option", { value: "" }, "route by bindings"),
    info.agents.map((a) => el("option", { value: a.id, selected: a.id === chatState.agent }, `${a.id} (${a.runner_id})`)));
  const conversation = el("input", { id: "conversation", value: chatState.conversation, size: 22 });
  let live = null; // { runId, controller }

  agent.addEventListener("change", () => (chatState.agent = agent.value));
  conversation.addEventListener("change", () => (chatState.conversation = conversation.value));

  async function runStream(path, body, userText) {
    const turn = el("div", { class: "turn" });
    if (userText) turn.append(el("div", { class: "msg user", "data-testid": "user-message" }, userText));
    transcript.append(turn);
    const controller = new AbortController();
    live = { runId: "", controller };
    const bubbles = {};
    const tools = {};
    const scroll = () => (transcript.scrollTop = transcript.scrollHeight);
    const bubble = (key, cls) => {
      if (!bubbles[key]) {
        bubbles[key] = el("div", { class: `msg bot ${cls}`, "data-testid": "bot-message" });
        turn.append(bubbles[key]);
      }
      return bubbles[key];
    };
    status.textContent = "sending…";
    cancel.hidden = false;
    try {
      await stream(path, { method: "POST", body: JSON.stringify(body) }, (ev) => {
        handle(ev);
        scroll();
      }, controller.signal);
    } catch (err) {
      if (err.name !== "AbortError") turn.append(el("div", { class: "bad" }, String(err)));
    }
    cancel.hidden = true;
    live = null;

    function handle(ev) {
      if (ev.type === "accepted") {
        live.runId = ev.run_id || "";
        turn.dataset.runId = live.runId;
        if (ev.run_id) {
          turn.prepend(el("div", { class: "meta" }, "run ",
            el("a", { href: `#/runs/${ev.run_id}`, "data-testid": "run-link" }, ev.run_id),
            ` · agent ${ev.agent_id} · binding ${ev.binding_id}`));
        }
        status.textContent = ev.run_id ? `run ${ev.run_id} running…` : "the event was discarded";
      } else if (ev.type === "result") {
        const d = ev.data || {};
        if (ev.payload === "message_delta") {
          const b = bubble(`m:${d.message_id || ""}`, `kind-${ev.message_kind || "answer"}`);
          b.textContent = d.cumulative_text !== undefined ? d.cumulative_text : b.textContent + (d.text || "");
        } else if (ev.payload === "message_completed" || (ev.payload === "run_completed" && d.message && d.message.content)) {
          const m = d.message || {};
          const b = bubble(`m:${m.message_id || ""}`, `kind-${ev.message_kind || "answer"}`);
          if (m.content) b.textContent = m.content;
        } else if (ev.payload === "tool_call_started") {
          tools[d.tool_call_id] = el("div", { class: "tool", "data-testid": "tool-call" },
            el("strong", {}, `tool ${d.tool_name}`), " ", el("code", {}, JSON.stringify(d.parameters || {})),
            el("div", { class: "meta" }, "running…"));
          turn.append(tools[d.tool_call_id]);
        } else if (ev.payload === "tool_call_completed") {
          const card = tools[d.tool_call_id] || turn.appendChild(el("div", { class: "tool", "data-testid": "tool-call" }, `tool ${d.tool_name}`));
          card.lastChild.textContent = d.error_code ? `failed: ${d.error_code} ${d.error_message || ""}` : `result: ${JSON.stringify(d.result_preview || {})}`;
        } else if (ev.payload === "run_log") {
          turn.append(el("div", { class: "log" }, `[${(d.level || "INFO").replace("RUN_LOG_LEVEL_", "").toLowerCase()}] ${d.text || ""}`));
        } else if (ev.payload === "run_failed") {
          turn.append(el("div", { class: "bad", "data-testid": "run-failed" }, `${d.code}: ${d.message || ""}`));
        }
      } else if (ev.type === "reply") {
        const key = `r:${ev.reply_id}`;
        if (ev.mode === "abort") {
          bubbles[key]?.remove();
          delete bubbles[key];
        } else bubble(key, "reply").textContent = ev.text;
      } else if (ev.type === "interaction") {
        turn.append(interactionForm(ev));
      } else if (ev.type === "finished") {
        status.textContent = `run ${ev.run_id || "-"}: ${ev.status}${ev.reason ? ` (${ev.reason})` : ""}`;
        turn.append(el("div", { class: "meta", "data-testid": "finished" }, `${ev.status}${ev.reason ? ` · ${ev.reason}` : ""}` +
          (ev.usage && Object.keys(ev.usage).length ? ` · usage ${usageText(ev.usage)}` : "")));
      } else if (ev.type === "error") {
        status.textContent = `error: ${ev.reason}`;
        turn.append(el("div", { class: "bad", "data-testid": "error" }, `${ev.reason}: ${ev.message}`));
      }
    }
  }

  function interactionForm(item) {
    const req = item.request || {};
    const form = el("form", { class: "interaction", "data-testid": "interaction", "data-interaction-id": req.interaction_id });
    form.append(el("strong", {}, req.title || "Input needed"));
    if (req.description) form.append(el("div", {}, req.description));
    const inputs = {};
    for (const f of req.fields || []) {
      const type = (f.type || "").replace("INTERACTION_FIELD_TYPE_", "");
      let input;
      if (type === "TEXTAREA") input = el("textarea", { name: f.id, placeholder: f.placeholder || "" });
      else if (type === "SELECT" || type === "MULTISELECT") {
        input = el("select", { name: f.id, multiple: type === "MULTISELECT" },
          type === "SELECT" ? el("option", { value: "" }, "—") : null,
          (f.options || []).map((o) => el("option", { value: o.value }, o.label || o.value)));
      } else if (type === "BOOLEAN") input = el("input", { type: "checkbox", name: f.id });
      else if (type === "NUMBER") input = el("input", { type: "number", name: f.id, placeholder: f.placeholder || "" });
      else input = el("input", { type: "text", name: f.id, placeholder: f.placeholder || "" });
      if (f.default_value !== undefined && type !== "BOOLEAN" && type !== "MULTISELECT") input.value = f.default_value;
      if (type === "BOOLEAN" && f.default_value === true) input.checked = true;
      inputs[f.id] = { input, type };
      form.append(el("label", {}, `${f.label}${f.required ? " *" : ""}`, input));
    }
    const values = () => {
      const out = {};
      for (const [id, { input, type }] of Object.entries(inputs)) {
        if (type === "BOOLEAN") out[id] = input.checked;
        else if (type === "MULTISELECT") out[id] = [...input.selectedOptions].map((o) => o.value);
        else if (type === "NUMBER") { if (input.value !== "") out[id] = Number(input.value); }
        else if (input.value !== "") out[id] = input.value;
      }
      return out;
    };
    const submit = (actionId) => {
      form.querySelectorAll("button, input, select, textarea").forEach((n) => (n.disabled = true));
      runStream(`/api/interactions/${encodeURIComponent(req.interaction_id)}`, { action_id: actionId, values: values() },
        actionId ? `(${actionId})` : "(submitted)");
    };
    const actions = el("div", { class: "actions" });
    const styleOf = (a) => (a.style === "INTERACTION_ACTION_STYLE_PRIMARY" ? "primary" : a.style === "INTERACTION_ACTION_STYLE_DANGER" ? "danger" : "");
    for (const a of req.actions || []) {
      actions.append(el("button", { type: "button", class: styleOf(a), "data-action": a.id, onclick: () => submit(a.id) }, a.label || a.id));
    }
    if (!(req.actions || []).length) actions.append(el("button", { type: "button", class: "primary", onclick: () => submit("") }, "Submit"));
    form.append(actions);
    form.addEventListener("submit", (e) => e.preventDefault());
    return form;
  }

  const send = () => {
    const text = input.value.trim();
    if (!text || live) return;
    input.value = "";
    runStream("/api/chat", { text, agent_id: agent.value, conversation_id: conversation.value }, text);
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      send();
    }
  });
  cancel.addEventListener("click", async () => {
    if (!live || !live.runId) return;
    cancel.disabled = true;
    try {
      await api(`/api/runs/${live.runId}/cancel`, { method: "POST", body: "{}" });
      status.textContent = `cancelling ${live.runId}…`;
    } catch (err) {
      status.textContent = String(err);
    }
    cancel.disabled = false;
  });

  view.replaceChildren(
    el("div", { class: "toolbar" },
      el("label", {}, "Agent", agent),
      el("label", {}, "Conversation", conversation),
      el("button", { onclick: () => {
        chatState.conversation = conversation.value = `console-${Math.random().toString(36).slice(2, 8)}`;
        transcript.replaceChildren();
      } }, "New conversation")),
    transcript,
    el("div", { class: "composer" }, input, el("button", { id: "send", class: "primary", onclick: send }, "Send"), cancel),
    status,
  );
  input.focus();
  return () => live?.controller.abort();
}

// ---------------------------------------------------------------------------------------------- runs
const STATUSES = ["created", "running", "completed", "failed", "cancelled", "interrupted", "discarded"];

function renderRuns(info) {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const status = el("select", { name: "status" }, el("option", { value: "" }, "any"),
    STATUSES.map((s) => el("option", { value: s, selected: params.get("status") === s }, s)));
  const agent = el("select", { name: "agent" }, el("option", { value: "" }, "any"),
    info.agents.map((a) => el("option", { value: a.id, selected: params.get("agent") === a.id }, a.id)));
  const runner = el("input", { name: "runner", value: params.get("runner") || "", placeholder: "plugin:…", size: 28 });
  const conversation = el("input", { name: "conversation", value: params.get("conversation") || "", size: 18 });
  const body = el("tbody", { id: "runs-body" });
  const note = el("div", { class: "meta", id: "runs-note" });
  let source = null;

  const watch = () => {
    source?.close();
    const query = new URLSearchParams();
    for (const [key, input] of Object.entries({ status, agent, runner, conversation })) if (input.value) query.set(key, input.value);
    history.replaceState(null, "", `#/runs${query.toString() ? `?${query}` : ""}`);
    source = new EventSource(`/api/runs/watch?${query}`);
    source.addEventListener("update", (e) => {
      const page = JSON.parse(e.data);
      if (page.type === "error") {
        note.textContent = `${page.reason}: ${page.message}`;
        return;
      }
      body.replaceChildren(...page.runs.map((r) =>
        el("tr", { class: "clickable", "data-run-id": r.run_id, onclick: () => (location.hash = `#/runs/${r.run_id}`) },
          el("td", {}, el("a", { href: `#/runs/${r.run_id}` }, r.run_id)), el("td", {}, badge(r.status)),
          el("td", {}, r.agent_id), el("td", {}, r.runner_id), el("td", {}, r.conversation_id),
          el("td", {}, fmtTime(r.create_time)), el("td", {}, duration(r)))));
      note.textContent = page.runs.length ? (page.next_page_token ? "newest 25 shown" : "") : "no runs match";
    });
  };
  const form = el("form", { class: "filters", onsubmit: (e) => { e.preventDefault(); watch(); } },
    el("label", {}, "Status", status), el("label", {}, "Agent", agent), el("label", {}, "Runner", runner),
    el("label", {}, "Conversation", conversation), el("button", { class: "primary" }, "Filter"));
  for (const input of [status, agent]) input.addEventListener("change", watch);
  view.replaceChildren(form, el("table", {}, el("thead", {}, el("tr", {},
    ["run", "status", "agent", "runner", "conversation", "created", "took"].map((h) => el("th", {}, h)))), body), note);
  watch();
  return () => source?.close();
}

// ------------------------------------------------------------------------------------------- one run
function timelineRow(e) {
  if (e.kind === "message") {
    const seq = e.first_sequence === e.last_sequence ? e.first_sequence : `${e.first_sequence}–${e.last_sequence}`;
    const label = `message${e.message_kind !== "answer" ? ` (${e.message_kind})` : ""}${e.deltas ? ` · ${e.deltas} deltas` : ""}`;
    return [seq, label, el("div", { class: `msg bot kind-${e.message_kind}` }, e.text)];
  }
  if (e.kind === "tool_call") {
    const outcome = e.error_code ? ` → ${e.error_code}: ${e.error_message || ""}` : e.result_preview ? ` → ${JSON.stringify(e.result_preview)}` : "";
    return [e.sequence, `tool ${e.tool_name} (${e.status})`, `${JSON.stringify(e.parameters)}${outcome}`];
  }
  if (e.kind === "log") return [e.sequence, `log ${e.level}`, el("span", { class: "log" }, e.text)];
  if (e.kind === "terminal") {
    const detail = [e.code, e.message, e.usage ? `usage ${usageText(e.usage)}` : ""].filter(Boolean).join(" · ");
    return [e.sequence, `run ${e.status}`, detail];
  }
  if (e.kind === "reply") return ["", `reply (${e.mode})`, e.text];
  if (e.kind === "interaction") return ["", "interaction", `${e.interaction_id}: ${e.title}`];
  return [e.sequence ?? "", e.kind, JSON.stringify(e.detail || {})];
}

function renderRun(runId) {
  const header = el("div", {});
  const rows = el("tbody", { "data-testid": "timeline" });
  const logs = el("div", { "data-testid": "logs" });
  const audit = el("tbody", { "data-testid": "audit" });
  const controller = new AbortController();
  let lastAudit = 0;

  const loadAudit = async () => {
    lastAudit = Date.now();
    const data = await api(`/api/runs/${runId}/audit`).catch(() => ({ audit: [] }));
    audit.replaceChildren(...data.audit.map((a) =>
      el("tr", {}, el("td", {}, fmtTime(a.time)), el("td", {}, a.method), el("td", {}, a.resource), el("td", {}, a.outcome))));
  };
  const show = (snap) => {
    if (snap.type === "error") {
      header.replaceChildren(el("p", { class: "bad" }, `${snap.reason}: ${snap.message}`));
      return;
    }
    const r = snap.run;
    const modelUsage = (r.metadata && r.metadata.model_usage) || {};
    const cancel = r.live && !snap.done ? el("button", { class: "danger", id: "run-cancel", onclick: async () => {
      await api(`/api/runs/${runId}/cancel`, { method: "POST", body: "{}" }).catch((err) => err instanceof SignInNeeded || alert(err));
    } }, "Cancel run") : null;
    header.replaceChildren(el("h2", {}, `Run ${r.run_id} `, badge(snap.done ? r.status : r.status), " ", cancel || ""),
      el("dl", { class: "record" },
        ...[["agent", r.agent_id], ["runner", r.runner_id], ["runtime", r.runtime_id], ["binding", r.binding_id], ["conversation", r.conversation_id],
          ["event", r.event_id], ["trace", r.trace_id], ["created", fmtTime(r.create_time)], ["finished", fmtTime(r.finish_time)],
          ["took", duration(r)], ["reason", r.status_reason || "-"], ["usage", usageText(r.usage)],
          ...Object.entries(modelUsage).map(([id, u]) => [`model ${id}`, `${usageText(u)}${u.calls ? `, ${u.calls} call(s)` : ""}`])]
          .flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v || "-")])));
    rows.replaceChildren(...snap.timeline.map((e) => el("tr", { "data-kind": e.kind }, timelineRow(e).map((c) => el("td", {}, c)))));
    const logLines = snap.timeline.filter((e) => e.kind === "log");
    logs.replaceChildren(...(logLines.length ? logLines.map((e) => el("div", { class: "log" }, `#${e.sequence} [${e.level}] ${e.text}`)) : [el("span", { class: "dim" }, "no run.log lines")]));
    if (snap.done || Date.now() - lastAudit > 2000) loadAudit();
  };
  view.replaceChildren(header, el("h2", {}, "Timeline"),
    el("table", {}, el("thead", {}, el("tr", {}, ["seq", "entry", "detail"].map((h) => el("th", {}, h)))), rows),
    el("h2", {}, "Logs"), logs,
    el("h2", {}, "Audit (proxy calls)"),
    el("table", {}, el("thead", {}, el("tr", {}, ["time", "method", "resource", "outcome"].map((h) => el("th", {}, h)))), audit));
  stream(`/api/runs/${runId}/timeline`, { method: "GET" }, show, controller.signal).catch((err) => {
    if (err.name !== "AbortError") header.append(el("p", { class: "bad" }, String(err)));
  });
  return () => controller.abort();
}

// ------------------------------------------------------------------------------------------- runners
function renderRunners() {
  const endpoints = el("tbody", { "data-testid": "endpoints" });
  const runners = el("tbody", { "data-testid": "runners" });
  const note = el("div", { class: "meta" });
  const load = async () => {
    try {
      const data = await api("/api/runners");
      endpoints.replaceChildren(...(data.endpoints || []).map((e) => el("tr", { "data-endpoint": e.endpoint_id },
        el("td", {}, e.endpoint_id), el("td", {}, e.address), el("td", {}, badge(e.available ? "up" : "down")),
        el("td", {}, e.last_error || ""), el("td", {}, (e.runner_ids || []).join(", ")), el("td", {}, fmtTime(e.check_time)))));
      runners.replaceChildren(...(data.runners || []).map((r) => el("tr", {},
        el("td", {}, r.manifest.id), el("td", {}, r.endpoint_id), el("td", {}, r.manifest.protocol_version),
        el("td", {}, (r.manifest.config_schema || []).map((f) => f.name).join(", ")))));
      note.textContent = `refreshed ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      note.textContent = String(err);
    }
  };
  view.replaceChildren(el("h2", {}, "Endpoints"),
    el("table", {}, el("thead", {}, el("tr", {}, ["endpoint", "address", "health", "last error", "runners", "checked"].map((h) => el("th", {}, h)))), endpoints),
    el("h2", {}, "Runners"),
    el("table", {}, el("thead", {}, el("tr", {}, ["runner id", "endpoint", "protocol", "config fields"].map((h) => el("th", {}, h)))), runners),
    note);
  load();
  const timer = setInterval(load, 2000);
  return () => clearInterval(timer);
}

// ------------------------------------------------------------------------------------------ runtimes
const cliText = (caps) => (caps || []).map((c) => (c.present
  ? `${c.name} ${c.version || "?"} (${c.login_status})` : `${c.name} absent`)).join(", ") || "-";
// when the host last heard from a runtime: an offline one says so (its last heartbeat is history)
const lastSeen = (r) => (r.status === "offline" ? `offline (last heartbeat ${fmtTime(r.heartbeat_time)})` : fmtTime(r.heartbeat_time));
const labelText = (labels) => Object.entries(labels || {}).map(([k, v]) => `${k}=${v}`).join(", ") || "-";

function renderRuntimes() {
  const rows = el("tbody", { "data-testid": "runtimes" });
  const note = el("div", { class: "meta" });
  const load = async () => {
    try {
      const data = await api("/api/runtimes");
      rows.replaceChildren(...data.runtimes.map((r) => el("tr", { "data-runtime": r.runtime_id, class: "clickable",
        onclick: () => (location.hash = `#/runtimes/${encodeURIComponent(r.runtime_id)}`) },
        el("td", {}, el("a", { href: `#/runtimes/${encodeURIComponent(r.runtime_id)}` }, r.runtime_id)),
        el("td", {}, badge(r.status)), el("td", { "data-testid": "replica" }, r.host_instance_id || "-"),
        el("td", { "data-testid": "slots" }, `${r.slots_in_use || 0}/${r.slots || 0}`),
        el("td", {}, labelText(r.labels)), el("td", {}, (r.runner_ids || []).join(", ")),
        el("td", { "data-testid": "clis" }, cliText(r.capabilities)), el("td", { "data-testid": "last-seen" }, lastSeen(r)))));
      if (!data.runtimes.length) rows.replaceChildren(el("tr", {}, el("td", { colspan: 8, class: "dim" },
        "no runtime has connected: python -m agentrunner connect HOST:PORT module:Runner")));
      note.textContent = `refreshed ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      note.textContent = String(err);
    }
  };
  view.replaceChildren(el("h2", {}, "Runtimes"),
    el("table", {}, el("thead", {}, el("tr", {}, ["runtime", "status", "replica", "slots in use", "labels", "runners", "CLIs", "last seen"].map((h) => el("th", {}, h)))), rows),
    note);
  load();
  const timer = setInterval(load, 2000);
  return () => clearInterval(timer);
}

function renderRuntime(runtimeId) {
  const header = el("div", {});
  const runs = el("tbody", { "data-testid": "runtime-runs" });
  const events = el("tbody", { "data-testid": "runtime-events" });
  const load = async () => {
    try {
      const data = await api(`/api/runtimes/${encodeURIComponent(runtimeId)}`);
      const r = data.runtime;
      const m = r.machine || {};
      header.replaceChildren(el("h2", {}, `Runtime ${r.runtime_id} `, badge(r.status)),
        el("dl", { class: "record" }, ...[["client", r.client_id], ["machine", `${m.hostname || ""} ${m.os || ""} ${m.arch || ""}`],
          ["sdk", `${(r.sdk || {}).language || ""} ${(r.sdk || {}).version || ""}`], ["labels", labelText(r.labels)],
          ["slots in use", `${r.slots_in_use || 0} of ${r.slots || 0}`], ["runners", (r.runner_ids || []).join(", ")],
          ["replica", r.host_instance_id], ["last seen", lastSeen(r)], ["connected", fmtTime(r.connect_time)], ["reason", r.status_reason],
          ...(r.capabilities || []).map((c) => [c.name, c.present ? `${c.version || "?"}, ${c.login_status}${c.login_detail ? ` (${c.login_detail})` : ""}` : "not on PATH"])]
          .flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v || "-")])));
      runs.replaceChildren(...data.runs.map((run) => el("tr", { class: "clickable", onclick: () => (location.hash = `#/runs/${run.run_id}`) },
        el("td", {}, el("a", { href: `#/runs/${run.run_id}` }, run.run_id)), el("td", {}, badge(run.status)),
        el("td", {}, run.agent_id), el("td", {}, fmtTime(run.create_time)))));
      events.replaceChildren(...data.events.map((e) => el("tr", {}, el("td", {}, fmtTime(e.time)), el("td", {}, e.kind),
        el("td", {}, e.run_id || ""), el("td", {}, `${e.reason || ""}${e.duration ? ` (${e.duration})` : ""}`))));
    } catch (err) {
      header.replaceChildren(el("p", { class: "bad" }, String(err)));
    }
  };
  view.replaceChildren(header, el("h2", {}, "Recent runs"),
    el("table", {}, el("thead", {}, el("tr", {}, ["run", "status", "agent", "created"].map((h) => el("th", {}, h)))), runs),
    el("h2", {}, "Audit"),
    el("table", {}, el("thead", {}, el("tr", {}, ["time", "event", "run", "reason"].map((h) => el("th", {}, h)))), events));
  load();
  const timer = setInterval(load, 2000);
  return () => clearInterval(timer);
}

// ------------------------------------------------------------------------------------------- sign-in
function renderSignIn(message) {
  leave();
  leave = () => {};
  document.getElementById("session").replaceChildren();
  const key = el("input", { id: "api-key", type: "password", autocomplete: "current-password", placeholder: "API key", size: 48 });
  const error = el("p", { class: "bad", "data-testid": "sign-in-error" }, message || "");
  const form = el("form", { id: "sign-in", "data-testid": "sign-in" },
    el("h2", {}, "Sign in"),
    el("p", { class: "dim" }, "This host requires client credentials: sign in with the API key of one of its clients " +
      "(auth.clients). The console then acts as that client; your browser keeps only a session cookie."),
    el("div", { class: "toolbar" }, key, el("button", { class: "primary", type: "submit", id: "sign-in-button" }, "Sign in")),
    error);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const response = await fetch("/api/session", { method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ api_key: key.value }) });
    const data = await response.json().catch(() => ({}));
    if (!response.ok) {
      error.textContent = `${data.error || response.status}: ${data.message || response.statusText}`;
      return;
    }
    key.value = "";
    session = data;
    route().catch(showError);
  });
  view.replaceChildren(form);
  key.focus();
}

async function signOut() {
  await fetch("/api/session", { method: "DELETE", headers: headers() }).catch(() => {});
  signedOut({ message: "signed out" });
}

function showSession() {
  const box = document.getElementById("session");
  if (!session || session.auth !== "api_key") return box.replaceChildren();
  box.replaceChildren(el("span", { "data-testid": "signed-in-as" }, `signed in as ${session.client_id}`), " · ",
    el("a", { href: "#", id: "sign-out", onclick: (ev) => { ev.preventDefault(); signOut(); } }, "sign out"));
}

// ------------------------------------------------------------------------------------------- routing
let info = null;

async function route() {
  leave();
  leave = () => {};
  if (!session) {
    const response = await fetch("/api/session", { headers: headers() });
    if (response.status === 401) return renderSignIn("");
    session = await response.json();
  }
  showSession();
  info = info || (await api("/api/info"));
  document.getElementById("host-info").textContent = `host ${info.instance_id} · v${info.version}`;
  const path = location.hash.replace(/^#/, "").split("?")[0] || "/chat";
  const page = path.split("/")[1];
  document.querySelectorAll("[data-nav]").forEach((a) => a.classList.toggle("active", a.dataset.nav === page));
  if (path.startsWith("/runs/")) leave = renderRun(decodeURIComponent(path.slice(6)));
  else if (page === "runs") leave = renderRuns(info);
  else if (page === "runners") leave = renderRunners();
  else if (path.startsWith("/runtimes/")) leave = renderRuntime(decodeURIComponent(path.slice(10)));
  else if (page === "runtimes") leave = renderRuntimes();
  else leave = renderChat(info);
}

function showError(err) {
  if (!(err instanceof SignInNeeded)) view.replaceChildren(el("p", { class: "bad" }, String(err)));
}

window.addEventListener("hashchange", () => route().catch(showError));
route().catch(showError);
