// The weir dashboard: polls this node's /ui/api/cluster once a second and
// draws what it says. Plain DOM, no library; every text from the server
// goes in through textContent, never as markup.
"use strict";

(() => {
  const WINDOW_S = 300; // what every node keeps: five minutes of seconds
  const AVERAGE_S = 10; // table rates: the mean of the last 10 whole seconds
  const MIN_SPAN_S = 60; // the shortest span a chart draws
  const POLL_MS = 1000;
  // After the first load only the last seconds are asked for again; they
  // replace what the page holds, so a second a slow member added late is
  // corrected on the next poll.
  const REFRESH_S = 15;
  const PALETTE = ["#1d3557", "#2a9d8f", "#e76f51", "#6a4c93", "#8ab17d",
    "#e9c46a", "#457b9d", "#b5838d", "#264653", "#f4a261"];
  const SVG_NS = "http://www.w3.org/2000/svg";

  /** unix second -> {rules: {name: [allowed, denied, shadow]}, fallback_decisions, deny_cache_hits, replica_decisions?} */
  const seconds = new Map();
  let loaded = false;
  let lastAnswer = null;

  function $(id) { return document.getElementById(id); }

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("data-")) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children) {
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function svg(tag, attrs) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }

  function colour(id) {
    let h = 0;
    for (const ch of id) h = (h * 31 + ch.codePointAt(0)) >>> 0;
    return PALETTE[h % PALETTE.length];
  }

  function pct(x) { return `${(x * 100).toFixed(1)}%`; }
  function rate(x) { return x.toFixed(x >= 100 ? 0 : 1); }

  function setStatus(status, text) {
    const s = $("status");
    s.dataset.status = status;
    s.textContent = text;
  }

  function merge(activity) {
    for (const s of activity) seconds.set(s.t, s);
    const latest = Math.max(...seconds.keys());
    for (const t of seconds.keys()) {
      if (t <= latest - WINDOW_S) seconds.delete(t);
    }
  }

  /** The seconds the charts span, oldest first, as [t, entry or undefined]:
   * the last five minutes, or since the first second any node reported
   * (at least a minute), so a young cluster's charts are not a sliver. */
  function windowSeconds() {
    if (seconds.size === 0) return [];
    const latest = Math.max(...seconds.keys());
    const earliest = Math.min(...seconds.keys());
    const span = Math.min(WINDOW_S, Math.max(MIN_SPAN_S, latest - earliest + 1));
    const out = [];
    for (let t = latest - span + 1; t <= latest; t++) out.push([t, seconds.get(t)]);
    return out;
  }

  function ago(s) {
    return s >= 60 && s % 60 === 0 ? `${s / 60} min ago` : `${s} s ago`;
  }

  /** Shown state: a live member that did not answer is unknown. */
  function shownState(m) {
    return m.reply === "no_answer" ? "unknown" : m.state;
  }

  function drawRing(members) {
    const ring = $("ring");
    ring.replaceChildren();
    const r = 84;
    const c = 2 * Math.PI * r;
    ring.append(svg("circle", { r, fill: "none", stroke: "#eef1f4", "stroke-width": 28 }));
    let from = 0;
    const owning = members.filter((m) => m.ring_share > 0)
      .sort((a, b) => a.id.localeCompare(b.id));
    for (const m of owning) {
      const len = m.ring_share * c;
      const arc = svg("circle", {
        r,
        fill: "none",
        stroke: colour(m.id),
        "stroke-width": 28,
        "stroke-dasharray": `${Math.max(len - 2, 0.5)} ${c}`,
        "stroke-dashoffset": `${-from}`,
        transform: "rotate(-90)",
        "data-member": m.id,
        opacity: shownState(m) === "alive" ? 1 : 0.45,
      });
      const title = svg("title", {});
      title.textContent = `${m.id}: ${pct(m.ring_share)} of the keys (${shownState(m)})`;
      arc.append(title);
      ring.append(arc);
      from += len;
    }
    const alive = members.filter((m) => shownState(m) === "alive").length;
    const big = svg("text", { "text-anchor": "middle", y: 6, class: "center-big" });
    big.textContent = String(alive);
    const small = svg("text", { "text-anchor": "middle", y: 26, class: "center-small" });
    small.textContent = `of ${members.length} alive`;
    ring.append(big, small);
  }

  function breakerText(s) {
    if (!s || !s.breakers) return el("span", { class: "na", title: "this node does not report breakers" }, "n/a");
    const open = s.breakers.filter((b) => b.state !== "closed");
    if (open.length === 0) return el("span", {}, "closed");
    return el("span", { class: "yes" }, open.map((b) => `${b.owner}: ${b.state}`).join(", "));
  }

  function optional(n, what) {
    return n === undefined
      ? el("span", { class: "na", title: `this node does not report ${what}` }, "n/a")
      : String(n);
  }

  function drawMembers(doc) {
    const tbody = $("members").tBodies[0];
    tbody.replaceChildren();
    const sorted = [...doc.members].sort((a, b) => a.id.localeCompare(b.id));
    for (const m of sorted) {
      const s = m.summary;
      const state = shownState(m);
      const name = el("td", {}, el("span", { class: "dot", title: m.grpc }), m.id);
      name.firstChild.style.background = colour(m.id);
      if (m.self) name.append(el("span", { class: "na" }, " (this node)"));
      const fb = s ? (s.fallback.active
        ? el("span", { class: "yes" }, `yes: ${s.fallback.owners.join(", ")}`)
        : "no") : "–";
      const badge = el("span", { class: `state ${state}` }, state);
      if (m.error) badge.title = m.error;
      tbody.append(el("tr", { "data-member": m.id, "data-state": state },
        name,
        el("td", {}, badge),
        el("td", { class: "num" }, pct(m.ring_share)),
        el("td", { class: "num" }, s ? `v${s.rules_version}` : "–"),
        el("td", {}, fb),
        el("td", {}, s ? breakerText(s) : "–"),
        el("td", { class: "num" }, s ? String(s.fallback_decisions) : "–"),
        el("td", { class: "num" }, s ? optional(s.replica_decisions, "replica decisions") : "–"),
        el("td", { class: "num" }, s ? String(s.deny_cache_hits) : "–")));
    }
    const unknown = doc.members.filter((m) => m.reply === "no_answer").length;
    $("members-note").textContent = unknown
      ? `${unknown} live member(s) did not answer in time: their figures are unknown and left out of the totals.`
      : "";
    drawRing(doc.members);
  }

  function drawThisNode(doc) {
    const me = doc.members.find((m) => m.self);
    const s = me && me.summary;
    const dl = $("this-node");
    dl.replaceChildren();
    const row = (k, v) => dl.append(el("dt", {}, k), el("dd", {}, v));
    row("node", doc.node_id);
    row("strategy", doc.strategy);
    if (!s) return;
    row("on the fallback", s.fallback.active
      ? el("span", { class: "yes" }, `yes, for ${s.fallback.owners.join(", ")}`)
      : "no");
    row("times an owner fell back", String(s.fallback.entered_total));
    row("breakers", s.breakers
      ? (s.breakers.length
        ? s.breakers.map((b) => `${b.owner}: ${b.state}`).join(", ")
        : "none open")
      : el("span", { class: "na" }, "not reported by this node"));
    row("checks decided on the fallback", String(s.fallback_decisions));
    row("checks decided by a replica", optional(s.replica_decisions, "replica decisions"));
    row("deny-cache answers", String(s.deny_cache_hits));
  }

  /** An SVG line chart of `series` ([{cls, label, values}]) over the window. */
  function chart(container, series, opts) {
    // Drawn at the container's own size, so text is never stretched.
    const w = container.clientWidth || opts.width;
    const h = container.clientHeight || opts.height;
    const pad = opts.labels ? 28 : 2;
    const top = opts.labels ? 12 : 2;
    const max = Math.max(1, ...series.flatMap((s) => s.values));
    const root = svg("svg", { viewBox: `0 0 ${w} ${h}` });
    root.append(svg("line", { x1: pad, x2: w, y1: h - 1, y2: h - 1, class: "axis" }));
    if (opts.labels) {
      const hi = svg("text", { x: 0, y: top + 3, class: "label" });
      hi.textContent = rate(max);
      const lo = svg("text", { x: 0, y: h - 2, class: "label" });
      lo.textContent = "0";
      const start = svg("text", { x: pad, y: 10, class: "label" });
      start.textContent = ago(series.length ? series[0].values.length : 0);
      const now = svg("text", { x: w - 2, y: 10, class: "label", "text-anchor": "end" });
      now.textContent = "now";
      root.append(hi, lo, start, now);
    }
    const n = Math.max(1, series.length ? series[0].values.length - 1 : 1);
    for (const s of series) {
      const pts = s.values.map((v, i) =>
        `${(pad + (i / n) * (w - pad)).toFixed(1)},${(h - 1 - (v / max) * (h - 1 - top)).toFixed(1)}`);
      const line = svg("polyline", { points: pts.join(" "), class: `line ${s.cls}` });
      const title = svg("title", {});
      title.textContent = s.label;
      line.append(title);
      root.append(line);
    }
    container.replaceChildren(root);
  }

  function drawCluster() {
    const win = windowSeconds();
    const series = [
      { cls: "fallback", label: "decided on the fallback /s", values: win.map(([, s]) => (s ? s.fallback_decisions : 0)) },
      { cls: "cache", label: "answered from the deny cache /s", values: win.map(([, s]) => (s ? s.deny_cache_hits : 0)) },
    ];
    if (win.some(([, s]) => s && s.replica_decisions !== undefined)) {
      series.push({ cls: "replica", label: "decided by a replica /s", values: win.map(([, s]) => (s && s.replica_decisions) || 0) });
    }
    chart($("cluster-chart"), series, { width: 1200, height: 120, labels: true });
    const legend = $("cluster-legend");
    legend.replaceChildren();
    for (const s of series) legend.append(el("span", { class: `swatch ${s.cls}` }), s.label);
  }

  function appliesTo(r) {
    const parts = [];
    if (r.tier) parts.push(`tier ${r.tier}`);
    if (r.client) parts.push(`client ${r.client}`);
    if (r.route) parts.push(r.route);
    if (parts.length === 0) parts.push("every request");
    return `${parts.join(", ")} · per ${r.by}`;
  }

  function drawRules(doc) {
    const win = windowSeconds();
    const names = doc.rules.rules.map((r) => r.name);
    // Checks counted under a name outside the set (Envoy overrides, a rule
    // removed a moment ago) still show while they are in the window.
    for (const [, s] of win) {
      for (const name of Object.keys((s && s.rules) || {})) {
        if (!names.includes(name)) names.push(name);
      }
    }
    const byName = new Map(doc.rules.rules.map((r) => [r.name, r]));
    const tbody = $("rules").tBodies[0];
    tbody.replaceChildren();
    const recent = win.slice(-AVERAGE_S);
    for (const name of names) {
      const r = byName.get(name);
      const column = (i) => win.map(([, s]) => ((s && s.rules[name]) || [0, 0, 0])[i]);
      const avg = (i) => recent.reduce((sum, [, s]) => sum + ((s && s.rules[name]) || [0, 0, 0])[i], 0) / AVERAGE_S;
      const [allowed, denied, shadow] = [avg(0), avg(1), avg(2)];
      const graph = el("div", { class: "chart small" });
      chart(graph, [
        { cls: "allowed", label: "allowed /s", values: column(0) },
        { cls: "denied", label: "denied /s", values: column(1) },
        { cls: "shadow", label: "shadow-denied /s", values: column(2) },
      ], { width: 220, height: 36, labels: false });
      const limit = r ? `${r.limit} / ${r.window}${r.shadow ? " · shadow" : ""}` : "–";
      tbody.append(el("tr", { "data-rule": name, class: denied > 0 ? "denying" : "" },
        el("td", {}, name, el("div", { class: "sub" }, r ? r.algorithm : "")),
        el("td", {}, r ? appliesTo(r) : "not in the rule set"),
        el("td", {}, limit),
        el("td", { class: "num allowed", "data-field": "allowed" }, rate(allowed)),
        el("td", { class: "num denied", "data-field": "denied" }, rate(denied)),
        el("td", { class: "num shadow", "data-field": "shadow" }, rate(shadow)),
        el("td", {}, graph)));
    }
  }

  function drawHotKeys(doc) {
    const box = $("hot-keys");
    const reporting = doc.members.filter((m) => m.summary && m.summary.hot_keys);
    if (reporting.length === 0) {
      box.replaceChildren(el("p", { class: "na" }, "No member reports hot keys."));
      return;
    }
    const rows = reporting.flatMap((m) => m.summary.hot_keys.map((k) => ({ owner: m.id, ...k })))
      .sort((a, b) => b.checks - a.checks);
    const table = el("table", { id: "hot" },
      el("thead", {}, el("tr", {}, el("th", {}, "key"), el("th", {}, "rule"), el("th", {}, "owner"), el("th", { class: "num" }, "checks"))));
    const tbody = el("tbody");
    for (const k of rows) {
      tbody.append(el("tr", { "data-hot-key": k.key }, el("td", {}, k.key), el("td", {}, k.rule), el("td", {}, k.owner), el("td", { class: "num" }, String(k.checks))));
    }
    table.append(tbody);
    box.replaceChildren(table);
  }

  function render(doc) {
    $("node-id").textContent = doc.node_id;
    $("strategy").textContent = doc.strategy;
    $("rules-version").textContent = `v${doc.rules.version}`;
    document.title = `weir · ${doc.node_id}`;
    drawMembers(doc);
    drawThisNode(doc);
    drawCluster();
    drawRules(doc);
    drawHotKeys(doc);
  }

  async function poll() {
    try {
      const ask = loaded ? REFRESH_S : WINDOW_S;
      const res = await fetch(`/ui/api/cluster?seconds=${ask}`, { cache: "no-store" });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const doc = await res.json();
      merge(doc.activity);
      loaded = true;
      lastAnswer = new Date();
      render(doc);
      setStatus("live", `live · ${lastAnswer.toLocaleTimeString()}`);
    } catch (e) {
      setStatus("stale", lastAnswer
        ? `no answer since ${lastAnswer.toLocaleTimeString()}`
        : `no answer (${e.message})`);
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  poll();
})();
