// The Lumen dashboard: polls /api/cluster (served by the head, see
// core/head/cluster_json.h for its shape) and redraws the page. Plain DOM, no
// libraries; text is always set with textContent (task errors and names come
// from user code). Beyond loopback the head wants its token: open the page as
// http://HOST:PORT/#token=TOKEN (the fragment never leaves the browser).
"use strict";

const POLL_MS = 1500;
const token = new URLSearchParams(location.hash.slice(1)).get("token");

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "title") node.title = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// A <table> with a header row and one row per item; `empty` when none.
function fillTable(table, columns, rows, empty) {
  table.replaceChildren();
  if (rows.length === 0) {
    table.append(el("tr", {}, el("td", { class: "empty" }, empty)));
    return;
  }
  table.append(el("tr", {}, ...columns.map(([title]) => el("th", {}, title))));
  for (const row of rows) {
    table.append(el("tr", {}, ...columns.map(([, cell]) => el("td", {}, cell(row)))));
  }
}

// "used / total" with a bar filled to the fraction used.
function meter(used, total, text) {
  const fraction = total > 0 ? Math.min(1, used / total) : 0;
  const level = fraction > 0.9 ? "high" : fraction > 0.6 ? "mid" : "low";
  const bar = el("span", { class: "bar" }, el("span", { class: "fill " + level }));
  bar.firstChild.style.width = (fraction * 100).toFixed(0) + "%";
  return el("span", { class: "meter" }, bar, el("span", { class: "meter-text" }, text));
}

// One line per GPU: "GPU 0 · 37 % busy" over a bar of its memory in use.
function gpuCell(gpus) {
  if (!gpus || gpus.length === 0) return "–";
  return el("span", { class: "gpus" }, ...gpus.map((g) => {
    const busy = g.utilization === null ? "busy: n/a" : Math.round(g.utilization * 100) + " % busy";
    return el("span", { class: "gpu", title: g.name },
      el("span", { class: "gpu-label" }, "GPU " + g.index + " · " + busy),
      meter(g.memory_used, g.memory_total, g.memory_text + " memory"));
  }));
}

function badge(state) {
  const s = String(state || "").toUpperCase();
  const kind = s === "ALIVE" || s === "RUNNING" || s === "CREATED" ? "ok"
    : s === "DEAD" || s === "FAILED" || s === "INFEASIBLE" ? "bad"
    : "wait";
  return el("span", { class: "badge " + kind }, s.replaceAll("_", " ").toLowerCase());
}

// "1 task", "3 tasks".
function plural(n, noun) { return n + " " + noun + (n === 1 ? "" : "s"); }

function card(label, value, note, kind) {
  return el("div", { class: "card " + (kind || "") },
    el("div", { class: "card-value" }, value),
    el("div", { class: "card-label" }, label),
    note ? el("div", { class: "card-note" }, note) : null);
}

function timeAgo(ms, now) {
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 60) return s + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  return new Date(ms).toLocaleTimeString();
}

function render(c) {
  const s = c.summary;
  document.getElementById("summary").replaceChildren(
    card("nodes alive", s.nodes_alive, s.nodes_dead ? s.nodes_dead + " dead" : null,
         s.nodes_dead ? "warn" : ""),
    card("tasks running", s.tasks_running, s.tasks_finished + " finished"),
    card("tasks waiting", s.tasks_queued, null, s.tasks_queued ? "warn" : ""),
    card("actors", s.actors, s.actors_alive + " alive"),
    card("placement groups", s.placement_groups),
    card("failures", s.failures, s.tasks_failed ? plural(s.tasks_failed, "task") + " failed" : null,
         s.failures ? "bad" : ""));

  const attention = [...c.infeasible.map((d) => ({ kind: "bad", text: d.text })),
                     ...c.pending.map((d) => ({ kind: "wait", text: d.text }))];
  for (const n of c.nodes) {
    if (n.alive && !n.answered && n.error) {
      attention.push({ kind: "wait", text: "node " + n.id + " did not list its tasks: " + n.error });
    }
  }
  document.getElementById("attention-section").hidden = attention.length === 0;
  document.getElementById("attention").replaceChildren(
    ...attention.map((a) => el("li", { class: a.kind }, a.text)));

  const names = [];
  // The store has its own column (object_store_memory is its size as a resource).
  for (const n of c.nodes) {
    for (const r of n.resources) {
      if (r.name !== "object_store_memory" && !names.includes(r.name)) names.push(r.name);
    }
  }
  const order = ["CPU", "GPU", "memory"];
  names.sort((a, b) => (order.indexOf(a) + 1 || 99) - (order.indexOf(b) + 1 || 99) || a.localeCompare(b));
  fillTable(document.getElementById("nodes"), [
    ["Node", (n) => el("span", {}, el("code", {}, n.id), el("div", { class: "sub" }, n.host + " · pid " + n.pid))],
    ["State", (n) => badge(n.alive ? "ALIVE" : "DEAD")],
    ...names.map((name) => [name, (n) => {
      const r = n.resources.find((x) => x.name === name);
      return r ? meter(r.used, r.total, r.text) : "–";
    }]),
    ["Object store", (n) => meter(n.store.used, n.store.capacity,
                                  n.store.text + " · " + n.store.objects + " objects")],
    // Only when a node samples its GPUs (NVML): one line per device.
    ...(c.nodes.some((n) => n.gpus && n.gpus.length) ? [["GPU use", (n) => gpuCell(n.gpus)]] : []),
    ["Workers", (n) => n.workers + " (" + n.idle_workers + " idle)"],
    ["Leases", (n) => n.active_leases + " active" + (n.queued_leases ? ", " + n.queued_leases + " waiting" : "")],
  ], c.nodes, "No node has joined yet.");

  const tasks = [...c.tasks.running, ...c.tasks.queued];
  fillTable(document.getElementById("tasks"), [
    ["Task", (t) => el("span", {}, el("strong", {}, t.name), el("div", { class: "sub" }, t.id))],
    ["State", (t) => badge(t.state)],
    ["Runs on node", (t) => t.node ? el("code", {}, t.node) : "–"],
    ["Submitted by", (t) => t.owner + " on node " + t.owner_node],
  ], tasks, "Nothing is running or waiting.");

  fillTable(document.getElementById("actors"), [
    ["Actor", (a) => el("span", {}, el("strong", {}, a.name || a.class), el("div", { class: "sub" }, a.class + " · " + a.id))],
    ["State", (a) => badge(a.state)],
    ["Node", (a) => a.node ? el("code", {}, a.node) : "–"],
    ["Pid", (a) => a.pid || "–"],
    ["Restarts", (a) => a.restarts],
    ["Owner", (a) => a.owner],
  ], c.actors, "No actors.");

  fillTable(document.getElementById("groups"), [
    ["Group", (g) => el("span", {}, el("strong", {}, g.name), el("div", { class: "sub" }, g.id))],
    ["Strategy", (g) => g.strategy],
    ["State", (g) => badge(g.state)],
    ["Bundles", (g) => g.bundles],
    ["On nodes", (g) => g.nodes],
    ["Why waiting", (g) => g.error || "–"],
  ], c.placement_groups, "No placement groups.");

  fillTable(document.getElementById("failures"), [
    ["When", (f) => timeAgo(f.time_ms, c.time_ms)],
    ["What", (f) => el("span", {}, el("strong", {}, f.name || f.kind),
                       el("div", { class: "sub" }, f.kind + (f.task_id ? " " + f.task_id : "") + " · node " + f.node))],
    ["Message", (f) => el("span", { class: "message" }, f.message)],
  ], c.failures, "No failures. ");
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const response = await fetch("api/cluster", { headers, cache: "no-store" });
    if (response.status === 401) throw new Error("the head wants its token: open this page as /#token=TOKEN");
    if (!response.ok) throw new Error("the head answered " + response.status);
    render(await response.json());
    status.textContent = "live · updated " + new Date().toLocaleTimeString();
    status.className = "status ok";
  } catch (e) {
    status.textContent = "not connected: " + e.message;
    status.className = "status bad";
  }
  setTimeout(poll, POLL_MS);
}

poll();
