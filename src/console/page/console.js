// The kafka-dlq console page. Every text that comes from a record (ids, keys, headers,
// payloads, error messages) is put in the page with textContent, never as markup; control
// characters are shown as \u{..} escapes. The Content-Security-Policy allows only this script.
"use strict";

const state = { csrf: null, role: null, showPayloads: false, topics: [], filter: {}, selection: new Map(), detail: null, redrive: null, poll: null };

function $(id) { return document.getElementById(id); }

// Control characters, made visible.
function vis(text) {
  if (text === null || text === undefined) return "";
  return String(text).replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069]/g,
    (c) => "\\u{" + c.charCodeAt(0).toString(16) + "}");
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = vis(text);
  if (cls) e.className = cls;
  return e;
}

function when(t) { return t ? String(t).replace("T", " ").replace(/\.\d+Z$/, "Z") : ""; }

function say(text, bad) {
  const m = $("message");
  m.textContent = vis(text);
  m.className = bad ? "message bad" : "message";
  m.hidden = !text;
}

async function api(method, path, body) {
  const headers = {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && state.csrf) headers["X-CSRF-Token"] = state.csrf;
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: "same-origin" });
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (response.status === 401) { showSignIn(data); throw new Error((data && data.error) || "sign in"); }
  if (!response.ok) throw new Error((data && data.error) || ("HTTP " + response.status));
  return data;
}

function query(filter) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(filter)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  return q.toString();
}

function showSignIn(data) {
  // The single sign-on link, when the console has one (the 401 of api/session says so).
  if (data && data.sign_in_url) { $("sso-sign-in").href = data.sign_in_url; $("sso").hidden = false; }
  $("signin").hidden = false;
  $("tabs").hidden = true;
  for (const v of document.querySelectorAll(".view")) v.hidden = true;
}

async function signIn(event) {
  event.preventDefault();
  try {
    const s = await api("POST", "api/session", { token: $("token").value });
    $("token").value = "";
    started(s);
  } catch (e) { say(e.message, true); }
}

async function signOut() {
  let out = null;
  try { out = await api("DELETE", "api/session"); } catch (e) { /* signed out anyway */ }
  state.csrf = null;
  // Signed in with single sign-on: sign out at the identity provider too.
  if (out && out.logout_url) { location.href = out.logout_url; return; }
  $("who").textContent = "";
  showSignIn();
}

function started(s) {
  state.csrf = s.csrf_token;
  state.role = s.role;
  state.showPayloads = s.show_payloads;
  document.body.classList.toggle("viewer", s.role !== "operator");
  const who = $("who");
  who.textContent = "";
  who.append(el("span", s.name + " (" + s.role + ")"));
  if (s.csrf_token) {
    const out = el("button", "Sign out");
    out.id = "sign-out";
    out.addEventListener("click", signOut);
    who.append(out);
  }
  $("signin").hidden = true;
  $("tabs").hidden = false;
  say("");
  const params = new URLSearchParams(location.search);
  const filter = {};
  for (const k of ["dlq_topic", "group", "source_topic", "kind", "fingerprint", "text", "older_than", "newer_than", "where"]) {
    if (params.get(k)) filter[k] = params.get(k);
  }
  for (const input of $("inbox-filter").elements) if (input.name && filter[input.name]) input.value = filter[input.name];
  if (params.get("request")) { show("requests"); }
  else if (filter.fingerprint || filter.where || params.get("letters")) { openLetters(filter); } else { show("inbox"); }
}

function show(tab) {
  for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== tab;
  for (const b of document.querySelectorAll(".tab")) b.classList.toggle("on", b.dataset.tab === tab);
  if (tab === "inbox") loadInbox();
  if (tab === "history") loadHistory();
  if (tab === "redrives") loadRedrives();
  if (tab === "requests") loadRequests();
}

function inboxFilter() {
  const f = {};
  for (const input of $("inbox-filter").elements) if (input.name && input.value) f[input.name] = input.value;
  return f;
}

async function loadInbox() {
  let data;
  try { data = await api("GET", "api/inbox?" + query(inboxFilter())); } catch (e) { say(e.message, true); return; }
  const s = data.status;
  $("status").textContent = vis(s.outstanding + " outstanding dead letters in " + s.causes + " causes · " +
    (s.current_at ? "current at " + when(s.current_at) : "building the inbox…") + (s.error ? " · cannot read: " + s.error : ""));
  const select = $("filter-dlq-topic");
  if (select.options.length - 1 !== s.dlq_topics.length) {
    const chosen = select.value;
    while (select.options.length > 1) select.remove(1);
    for (const t of s.dlq_topics) { const o = el("option", t); o.value = t; select.append(o); }
    select.value = chosen;
  }
  const body = $("inbox-table").tBodies[0];
  body.textContent = "";
  for (const row of data.rows) {
    const tr = el("tr", undefined, "cause");
    tr.dataset.fingerprint = row.fingerprint;
    tr.append(el("td", row.new ? "new" : "", row.new ? "badge" : ""));
    tr.append(el("td", row.group), el("td", row.source_topic), el("td", row.dlq_topic));
    const cause = el("td", row.fingerprint, "fingerprint");
    cause.title = vis(row.message);
    tr.append(cause, el("td", row.kind), el("td", row.count, "n count"), el("td", when(row.first_seen)), el("td", when(row.last_seen)));
    tr.append(el("td", [row.ages.hour, row.ages.day, row.ages.week, row.ages.older].join(" · ")));
    const trend = el("td", undefined, "trend");
    const max = Math.max(1, ...row.trend);
    for (const n of row.trend) {
      const bar = el("span");
      bar.style.height = Math.max(1, Math.round(18 * n / max)) + "px";
      bar.title = String(n);
      trend.append(bar);
    }
    tr.append(trend);
    tr.append(el("td", parkedText(row.parked), "parked"));
    tr.addEventListener("click", () => openLetters({ dlq_topic: row.dlq_topic, group: row.group, source_topic: row.source_topic, fingerprint: row.fingerprint }));
    body.append(tr);
  }
  $("inbox-empty").hidden = data.rows.length > 0;
}

// What waits behind some dead letters (key_order_after_failure = park): "" when nothing does.
function parkedText(p) {
  if (!p || !p.keys) return "";
  return p.keys + (p.keys === 1 ? " key" : " keys") + " · " + p.records + (p.records === 1 ? " record" : " records") + " waiting" + (p.oldest ? " since " + when(p.oldest) : "");
}

// What a discard released of the keys parked behind its dead letters: "" when nothing.
function releasedText(p) {
  if (!p || !p.keys) return "";
  return " Released " + p.records + " parked " + (p.records === 1 ? "record" : "records") + " of " + p.keys + (p.keys === 1 ? " key" : " keys") + ", in order.";
}

// What a redrive or discard releases of the keys parked behind its dead letters.
function releasesText(p, would) {
  if (!p || !p.keys) return "";
  return " " + (would ? "Would release " : "Releases ") + p.records + " parked " + (p.records === 1 ? "record" : "records") + " of " + p.keys + (p.keys === 1 ? " key" : " keys") + ", in order" + (would ? "" : ", as their heads are handled") + ".";
}

async function openLetters(filter) {
  state.filter = filter;
  state.selection.clear();
  $("detail").hidden = true;
  show("letters");
  const chosen = $("letters-filter");
  chosen.textContent = "";
  chosen.append(el("span", "Filter: "));
  for (const [k, v] of Object.entries(filter)) if (k !== "where") chosen.append(el("code", k + " = " + v));
  $("where").value = filter.where || "";
  loadViews();
  await loadLetters();
}

// Saved views: each is a link, the filter in its query string.
async function loadViews() {
  let data;
  try { data = await api("GET", "api/views"); } catch (e) { return; }
  const select = $("views");
  while (select.options.length > 1) select.remove(1);
  for (const v of data.views) {
    const o = el("option", v.name + " (" + v.saved_by + ")");
    o.value = v.query;
    select.append(o);
  }
}

async function saveView(e) {
  e.preventDefault();
  const name = $("view-name").value.trim();
  if (!name) { say("Name the view.", true); return; }
  try {
    const v = await api("POST", "api/views", { name, query: query(state.filter) });
    $("view-name").value = "";
    say("Saved the view " + v.name + ": " + location.origin + location.pathname + "?" + v.query + "&letters=1");
    loadViews();
  } catch (err) { say(err.message, true); }
}

// The expression narrows the letters shown and every action on them; an empty one is none.
function applyWhere(e) {
  e.preventDefault();
  const f = Object.assign({}, state.filter);
  const text = $("where").value.trim();
  if (text) f.where = text; else delete f.where;
  openLetters(f);
}

async function loadLetters() {
  // A list asked for an earlier filter (a redrive's end reloads it) may answer after the one
  // the operator asked for since: only the list of the filter shown now is drawn.
  const asked = state.filter;
  let data;
  try { data = await api("GET", "api/dead-letters?" + query(Object.assign({ limit: 200 }, asked))); } catch (e) { say(e.message, true); return; }
  if (state.filter !== asked) return;
  const body = $("letters-table").tBodies[0];
  body.textContent = "";
  for (const d of data.dead_letters) {
    const tr = el("tr", undefined, "dead-letter");
    const box = el("td");
    const check = document.createElement("input");
    check.type = "checkbox";
    check.className = "pick";
    const key = d.partition + "@" + d.offset;
    check.checked = state.selection.has(key);
    check.addEventListener("click", (ev) => { ev.stopPropagation(); if (check.checked) state.selection.set(key, d); else state.selection.delete(key); scope(); });
    box.append(check);
    tr.append(box, el("td", d.id, "id"), el("td", when(d.timestamp || d.written_at)), el("td", d.kind), el("td", d.message, "error"));
    tr.append(el("td", d.source ? d.source.topic + "/" + d.source.partition + "@" + d.source.offset : ""));
    tr.append(el("td", d.dlq_topic + "/" + d.partition + "@" + d.offset));
    tr.addEventListener("click", () => openDetail(d.dlq_topic, d.partition, d.offset));
    body.append(tr);
  }
  $("letters-more").hidden = !data.more;
  scope();
}

function scope() {
  $("action-scope").textContent = state.selection.size > 0 ? "the " + state.selection.size + " selected" : "every dead letter the filter matches";
}

function selectionFilter() {
  const f = Object.assign({}, state.filter);
  if (state.selection.size > 0) {
    const picked = [...state.selection.values()];
    f.dlq_topic = picked[0].dlq_topic;
    f.records = picked.map((d) => ({ partition: d.partition, offset: d.offset }));
  }
  return f;
}

async function openDetail(topic, partition, offset) {
  let d;
  try { d = await api("GET", "api/dead-letters/" + encodeURIComponent(topic) + "/" + partition + "/" + offset); } catch (e) { say(e.message, true); return; }
  state.detail = d;
  $("detail").hidden = false;
  $("detail-id").textContent = vis(d.id);
  const fields = $("detail-fields");
  fields.textContent = "";
  const add = (name, value) => { if (value === undefined || value === null || value === "") return; fields.append(el("dt", name), el("dd", typeof value === "object" ? JSON.stringify(value) : value)); };
  add("Outstanding", d.outstanding ? "yes" : "no — " + describeResolution(d.resolution));
  add("Kind", d.kind);
  add("Error", d.message);
  add("Fingerprint", d.fingerprint);
  add("Group", d.group);
  if (d.source) add("Source", d.source.topic + " partition " + d.source.partition + " offset " + d.source.offset + (d.source.timestamp ? " written " + when(d.source.timestamp) : ""));
  add("Dead letter", d.dlq_topic + " partition " + d.partition + " offset " + d.offset);
  add("Dead-lettered", when(d.timestamp || d.written_at));
  if (d.parked) add("Parked behind it", d.parked.records + (d.parked.records === 1 ? " record" : " records") + " of this key " + (d.parked.records === 1 ? "is" : "are") + " waiting behind it, since " + when(d.parked.since) + ": released in order once it is redriven and handled, or discarded");
  add("Attempts", d.attempts);
  add("Delivery count", d.delivery_count);
  add("Trace id", d.trace_id);
  add("Format", d.format);
  add("Unresolved", d.unresolved);
  add("Not an envelope", d.not_an_envelope);
  const payload = d.payload;
  $("payload-why").textContent = "";
  const pre = $("detail-payload");
  const edit = $("edit-payload");
  if (d.hidden) {
    $("payload-as").textContent = "(hidden from viewers)";
    pre.textContent = "";
    edit.value = "";
  } else if (payload) {
    $("payload-as").textContent = "as " + payload.as + (payload.schema_id !== undefined ? ", schema id " + payload.schema_id : "");
    if (payload.as === "json") { pre.textContent = vis(payload.pretty); }
    else if (payload.as === "text") { pre.textContent = vis(payload.text); $("payload-why").textContent = vis(payload.why); }
    else if (payload.as === "binary") { pre.textContent = "hex:\n" + payload.hex + "\n\nbase64:\n" + payload.base64; $("payload-why").textContent = vis(payload.why); }
    else if (payload.as === "none") { pre.textContent = "(no payload: a tombstone)"; }
    else { pre.textContent = vis(payload.why || payload.as); }
    // A Schema Registry payload decoded with its schema: the JSON first, the bytes below.
    if (d.decoded && d.decoded.json !== undefined) {
      const s = d.decoded.schema || {};
      $("payload-as").textContent = "decoded: " + s.type + (s.subject ? " " + s.subject + " version " + s.version : "") + (s.id !== undefined ? ", schema id " + s.id : "");
      pre.textContent = vis(d.decoded.json) + "\n\n— the bytes —\n" + pre.textContent;
    } else if (d.decoded && d.decoded.error) {
      $("payload-why").textContent = "does not decode with its schema: " + vis(d.decoded.error);
    }
  }
  // The editor holds the payload's own bytes, never the view above: its exact text (after a
  // schema prefix, which is kept), base64 for bytes that are not text, nothing for a tombstone.
  const editable = d.editable || { as: "none", why: d.hidden ? "hidden from viewers" : "no payload" };
  state.editAs = editable.as;
  edit.disabled = editable.as === "none";
  $("edit-redrive").disabled = editable.as === "none";
  edit.value = editable.as === "text" ? editable.text : editable.as === "base64" ? editable.base64 : editable.as === "decoded" ? editable.json : "";
  $("edit-as").textContent = editable.as === "text" ? (editable.schema_prefix ? "as text; its 5-byte schema prefix is kept in front" : "as text, exactly as it failed")
    : editable.as === "base64" ? "as base64: the payload is not text"
    : editable.as === "decoded" ? "as JSON decoded with its schema (" + editable.schema.type + "); encoded again with the same schema"
    : "not editable: " + vis(editable.why);
  $("detail-key").textContent = d.key ? vis(d.key.text !== undefined ? d.key.text : "base64: " + d.key.base64) : d.hidden ? "(hidden)" : "(none)";
  const headers = $("detail-headers").tBodies[0];
  headers.textContent = "";
  for (const h of Array.isArray(d.headers) ? d.headers : []) {
    const name = h.name ? (h.name.text !== undefined ? h.name.text : "base64: " + h.name.base64) : "";
    const value = h.value ? (h.value.text !== undefined ? h.value.text : "base64: " + h.value.base64) : d.hidden ? "(hidden)" : "(null)";
    const tr = el("tr");
    tr.append(el("td", name), el("td", value));
    headers.append(tr);
  }
  const history = $("detail-history").tBodies[0];
  history.textContent = "";
  for (const stage of d.history || []) {
    const tr = el("tr");
    tr.append(el("td", stage.topic), el("td", stage.attempts, "n"), el("td", stage.error), el("td", when(stage.at)));
    history.append(tr);
  }
  const actions = $("detail-actions");
  actions.textContent = "";
  for (const r of d.actions || []) actions.append(el("li", when(r.started) + " " + r.action + " by " + r.operator + (r.reason ? ": " + r.reason : "") + " (" + r.run + ")"));
  $("detail").scrollIntoView();
}

function describeResolution(r) {
  if (!r) return "";
  if (r.by === "replayed") return "replayed";
  if (r.by === "redriven") return "redriven by " + r.operator + " (" + r.run + ")";
  if (r.by === "discarded") return "discarded by " + r.operator + " at " + when(r.at) + ": " + r.reason + " (" + r.run + ")";
  return r.by;
}

function destination() {
  const d = $("destination").value;
  return d === "topic" ? { topic: $("destination-topic").value } : d;
}

// The transformation the fix form holds, or null (said why) when it does not read.
function fixTransform() {
  const text = $("fix-text").value.trim();
  if ($("fix-kind").value === "expression") return text ? { expression: text } : null;
  try { return { merge_patch: JSON.parse(text) }; }
  catch (e) { say("The merge patch is not JSON: " + e.message, true); return null; }
}

// Before and after, line by line: the lines that differ marked.
function diffCells(before, after) {
  const a = (before || "").split("\n"), b = (after === null || after === undefined ? before || "" : after).split("\n");
  const cell = (lines, other) => {
    const pre = el("pre", undefined, "diff");
    lines.forEach((line, i) => pre.append(el("span", line + "\n", other[i] === line ? "same" : "changed")));
    const td = el("td");
    td.append(pre);
    return td;
  };
  return [cell(a, b), cell(b, a)];
}

async function previewFix() {
  const transform = fixTransform();
  if (!transform) return;
  let p;
  try { p = await api("POST", "api/transforms/preview", { filter: selectionFilter(), transform }); } catch (e) { say(e.message, true); return; }
  $("fix-counts").textContent = vis(p.count + " outstanding dead letters: " + p.changed + " changed, " + p.unchanged + " unchanged, " + p.failed + " failed (not sent) · read in " + p.elapsed_ms + " ms");
  const body = $("fix-table").tBodies[0];
  body.textContent = "";
  for (const r of p.records) {
    const tr = el("tr", undefined, "fix " + r.state);
    tr.append(el("td", r.id), el("td", r.state + (r.why ? ": " + r.why : "")), ...diffCells(r.before, r.after));
    body.append(tr);
  }
  $("fix-table").hidden = p.records.length === 0;
}

async function redriveFix() {
  const transform = fixTransform();
  if (!transform) return;
  const request = { filter: selectionFilter(), destination: destination(), transform };
  const rate = parseInt($("rate").value, 10);
  if (rate > 0) request.rate = rate;
  await startRedrive(false, request);
}

async function startRedrive(dryRun, body) {
  const request = body || { filter: selectionFilter(), destination: destination(), dry_run: dryRun };
  const rate = parseInt($("rate").value, 10);
  if (!body && rate > 0) request.rate = rate;
  let started;
  try { started = await api("POST", "api/redrives", request); } catch (e) { say(e.message, true); return; }
  if (started.request) { asked(started.request, started.parked); return; }
  say((dryRun ? "Dry run " : "Redrive ") + started.id + " started.");
  watchRedrive(started.id);
}

// A redrive or discard that waits for a second operator.
function asked(r, parked) {
  say("A " + r.action + " of " + r.count + " dead letters waits for another operator's approval (request " + r.id + ")." + releasesText(parked, true));
}

async function loadRequests() {
  let data;
  try { data = await api("GET", "api/requests"); } catch (e) { say(e.message, true); return; }
  const body = $("requests-table").tBodies[0];
  body.textContent = "";
  const wanted = new URLSearchParams(location.search).get("request");
  for (const r of data.requests) {
    const tr = el("tr", undefined, "request " + r.state);
    tr.dataset.id = r.id;
    if (r.id === wanted) tr.classList.add("wanted");
    tr.append(el("td", when(r.requested_at)), el("td", r.action + (r.edited ? " (edited)" : "")), el("td", r.requested_by), el("td", r.dlq_topic),
      el("td", r.filter || "(none)", "filter"), el("td", r.destination || ""), el("td", r.count, "n"), el("td", r.reason || ""),
      el("td", r.state + (r.decided_by ? " by " + r.decided_by : "") + (r.decision_reason ? ": " + r.decision_reason : "")));
    const cell = el("td");
    if (r.yours_to_decide) {
      for (const [label, decision] of [["Approve", "approve"], ["Reject", "reject"]]) {
        const b = el("button", label);
        b.className = decision;
        b.addEventListener("click", async () => {
          const reason = $("decision-reason").value.trim();
          try {
            const d = await api("POST", "api/requests/" + encodeURIComponent(r.id) + "/" + decision, { reason });
            const done = d.carried_out;
            say("Request " + r.id + " " + d.state + (done && done.redrive ? ": redrive " + done.redrive + " started." : done && done.discarded !== undefined ? ": " + done.discarded + " dead letters discarded." + releasedText(done.released) : "."));
            if (done && done.redrive) { show("letters"); watchRedrive(done.redrive); } else loadRequests();
          } catch (e) { say(e.message, true); }
        });
        cell.append(b);
      }
    }
    tr.append(cell);
    body.append(tr);
  }
}

function watchRedrive(id) {
  state.redrive = id;
  $("progress").hidden = false;
  $("preview-table").hidden = true;
  if (state.poll) clearInterval(state.poll);
  const tick = async () => {
    let p;
    try { p = await api("GET", "api/redrives/" + encodeURIComponent(id)); } catch (e) { say(e.message, true); return; }
    $("progress-id").textContent = vis(p.id + (p.dry_run ? " (dry run)" : ""));
    $("progress-state").textContent = p.state;
    $("progress").dataset.state = p.state;
    const bar = $("progress-bar");
    bar.max = Math.max(1, p.total);
    bar.value = Math.min(p.scanned, bar.max);
    $("progress-counts").textContent = vis((p.transform ? "fix: " + p.transform.changed + " changed, " + p.transform.unchanged + " unchanged, " + p.transform.failed + " failed · " : "") + "read " + p.scanned + " of " + p.total + " · " + (p.dry_run ? "would send " : "sent ") + p.sent +
      " · refused " + p.refused + " · failed " + p.failed + (Object.keys(p.destinations).length ? " · to " + Object.entries(p.destinations).map(([t, n]) => t + ": " + n).join(", ") : "") +
      (p.rate ? " · at most " + p.rate + "/s" : "") + (p.runner ? " · on " + p.runner : "") + (p.waiting ? " · " + p.waiting : "") +
      (p.parked && p.parked.keys ? " ·" + releasesText(p.parked, p.dry_run) : ""));
    const problems = $("progress-problems");
    problems.textContent = "";
    for (const x of p.problems) problems.append(el("li", x));
    if (p.dry_run) {
      const body = $("preview-table").tBodies[0];
      body.textContent = "";
      for (const planned of p.preview) { const tr = el("tr"); tr.append(el("td", planned.id), el("td", planned.to)); body.append(tr); }
      $("preview-table").hidden = p.preview.length === 0;
    }
    $("pause").hidden = p.dry_run || p.state !== "running";
    $("resume").hidden = p.dry_run || p.state !== "paused";
    $("cancel").hidden = p.dry_run || !(p.state === "running" || p.state === "paused");
    if (p.state === "done" || p.state === "cancelled" || p.state === "failed") {
      clearInterval(state.poll);
      state.poll = null;
      say((p.dry_run ? "Dry run " : "Redrive ") + p.state + ": " + (p.dry_run ? "would send " : "sent ") + p.sent + ", refused " + p.refused + ", failed " + p.failed + (p.problems.length ? " — " + p.problems[0] : ""), p.state === "failed");
      if (!p.dry_run) loadLetters();
    }
  };
  tick();
  state.poll = setInterval(tick, 500);
}

async function control(what) {
  try { await api("POST", "api/redrives/" + encodeURIComponent(state.redrive) + "/" + what); } catch (e) { say(e.message, true); }
}

async function discard() {
  const reason = $("discard-reason").value.trim();
  if (!reason) { say("Say why they need no redrive: the reason goes into the audit.", true); return; }
  try {
    const r = await api("POST", "api/discards", { filter: selectionFilter(), reason });
    if (r.request) { asked(r.request, r.parked); return; }
    say("Discarded " + r.discarded + " dead letters (" + r.run + "); restore them from the history." + releasedText(r.released));
    $("discard-reason").value = "";
    state.selection.clear();
    loadLetters();
  } catch (e) { say(e.message, true); }
}

async function editRedrive() {
  const d = state.detail;
  if (!d) return;
  const body = { filter: { dlq_topic: d.dlq_topic, records: [{ partition: d.partition, offset: d.offset }] }, destination: destination() };
  if (state.editAs === "base64") body.payload_base64 = $("edit-payload").value;
  else if (state.editAs === "decoded") {
    try { body.payload_json = JSON.parse($("edit-payload").value); }
    catch (e) { say("The edited payload is not JSON: " + e.message, true); return; }
  } else body.payload = $("edit-payload").value;
  await startRedrive(false, body);
}

function exportLines() {
  const f = Object.assign({}, state.filter);
  if (state.selection.size > 0) {
    const picked = [...state.selection.values()];
    f.dlq_topic = picked[0].dlq_topic;
    f.records = picked.map((d) => d.partition + "@" + d.offset).join(",");
  }
  const a = document.createElement("a");
  a.href = "api/export?" + query(f);
  a.download = "dead-letters.jsonl";
  document.body.append(a);
  a.click();
  a.remove();
}

async function loadHistory() {
  let data;
  try { data = await api("GET", "api/history"); } catch (e) { say(e.message, true); return; }
  const body = $("history-table").tBodies[0];
  body.textContent = "";
  const restored = new Set(data.runs.filter((r) => r.action === "restore").map((r) => r.restores));
  for (const r of data.runs) {
    const tr = el("tr", undefined, "run " + r.action);
    const count = r.action === "replay" ? r.replayed : r.action === "discard" ? r.passed_over : "";
    const ended = r.error ? "failed: " + r.error : r.interrupted ? "interrupted" : r.action === "replay" ? "done" : "";
    tr.append(el("td", when(r.started)), el("td", r.action + (r.edited ? " (edited)" : "")), el("td", r.operator + "@" + r.host), el("td", r.dlq_topic),
      el("td", r.filter || "(none)", "filter"), el("td", r.to), el("td", count, "n"), el("td", ended), el("td", r.reason || (r.restores ? "restores " + r.restores : "")));
    const cell = el("td");
    if (r.action === "discard" && !restored.has(r.run) && state.role === "operator") {
      const b = el("button", "Restore");
      b.className = "restore";
      b.addEventListener("click", async () => {
        try { await api("POST", "api/discards/" + encodeURIComponent(r.run) + "/restore", { reason: "restored from the console" }); say("Restored " + r.run + "."); loadHistory(); } catch (e) { say(e.message, true); }
      });
      cell.append(b);
    }
    tr.append(cell);
    body.append(tr);
  }
}

async function loadRedrives() {
  let data;
  try { data = await api("GET", "api/redrives"); } catch (e) { say(e.message, true); return; }
  const body = $("redrives-table").tBodies[0];
  body.textContent = "";
  for (const p of data.redrives) {
    const tr = el("tr");
    tr.append(el("td", p.id + (p.dry_run ? " (dry run)" : "")), el("td", p.state), el("td", p.operator), el("td", p.dlq_topic), el("td", p.filter || "(none)", "filter"),
      el("td", p.destination), el("td", p.sent, "n"), el("td", p.refused, "n"), el("td", p.failed, "n"), el("td", when(p.started)));
    tr.addEventListener("click", () => { show("letters"); watchRedrive(p.id); });
    body.append(tr);
  }
}

document.addEventListener("DOMContentLoaded", async () => {
  $("signin-form").addEventListener("submit", signIn);
  $("inbox-filter").addEventListener("submit", (e) => { e.preventDefault(); loadInbox(); });
  $("where-form").addEventListener("submit", applyWhere);
  for (const b of document.querySelectorAll(".tab")) b.addEventListener("click", () => show(b.dataset.tab));
  $("dry-run").addEventListener("click", () => startRedrive(true));
  $("redrive").addEventListener("click", () => startRedrive(false));
  $("discard").addEventListener("click", discard);
  $("export").addEventListener("click", exportLines);
  $("edit-redrive").addEventListener("click", editRedrive);
  $("fix-preview").addEventListener("click", previewFix);
  $("views-form").addEventListener("submit", saveView);
  $("views").addEventListener("change", () => { if ($("views").value) location.search = "?" + $("views").value + "&letters=1"; });
  $("fix-redrive").addEventListener("click", redriveFix);
  $("pause").addEventListener("click", () => control("pause"));
  $("resume").addEventListener("click", () => control("resume"));
  $("cancel").addEventListener("click", () => control("cancel"));
  $("destination").addEventListener("change", () => { $("destination-topic").hidden = $("destination").value !== "topic"; });
  $("select-all").addEventListener("change", () => {
    for (const box of document.querySelectorAll("#letters-table .pick")) { if (box.checked !== $("select-all").checked) box.click(); }
  });
  setInterval(() => { if (!$("inbox").hidden) loadInbox(); }, 5000);
  const failed = new URLSearchParams(location.search).get("sign_in_error");
  try { started(await api("GET", "api/session")); } catch (e) { if (failed) say(failed, true); }
});
