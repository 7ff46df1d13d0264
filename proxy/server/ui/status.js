// frugal-proxy's status page: polls /ui/data (docs/ui.md has its schema) and draws it with the
// DOM alone (createElement and text nodes only: tool names come from clients). No library, no build.
"use strict";

const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";
let paused = false;
let last = null; // the last answer, and the offset of the server's clock from ours
let offset = 0;
let drawn = null; // what the drawn page shows (the answer less its clocks): unchanged, nothing is redrawn
let polls = 0, renders = 0; // counted on <body> as data-polls and data-renders (the tests wait on them)

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function table(headers, rows, label, key) {
  // `key`: the region's name across redraws, to give it back its scroll position and focus.
  const head = el("tr", null, ...headers.map(([text, cls]) => el("th", { scope: "col", class: cls }, text)));
  const wrap = el("div", { class: "scroll", tabindex: "0", role: "region", "aria-label": label,
    "data-key": `region:${key}:${label}` });
  wrap.append(el("table", null, el("thead", null, head), el("tbody", null, ...rows)));
  return wrap;
}

function ms(value) {
  if (value === null || value === undefined) return "–";
  return value >= 1000 ? (value / 1000).toFixed(2) + " s" : Math.round(value) + " ms";
}

function bytes(value) {
  if (!value) return "–";
  if (value >= 1048576) return (value / 1048576).toFixed(1) + " MiB";
  if (value >= 1024) return (value / 1024).toFixed(1) + " KiB";
  return value + " B";
}

function clock(epoch) {
  return new Date(epoch * 1000).toLocaleTimeString();
}

function countdown(until) {
  const left = Math.max(0, Math.round(until - (Date.now() / 1000 + offset)));
  const minutes = Math.floor(left / 60);
  return minutes ? `${minutes}m ${String(left % 60).padStart(2, "0")}s` : `${left}s`;
}

function budgetBar(spent, cap) {
  // Exact amounts are the text; the bar's length is drawn from the integer micro-dollars.
  const share = cap.micros > 0 ? Math.min(1, spent.micros / cap.micros) : 1;
  const bar = svg("svg", { class: "budget", viewBox: "0 0 100 10", role: "img",
    "aria-label": `${spent.usd} of ${cap.usd} spent today` });
  bar.append(svg("rect", { class: "track", x: "0", y: "0", width: "100", height: "10", rx: "2" }));
  bar.append(svg("rect", { class: share >= 1 ? "fill full" : "fill", x: "0", y: "0",
    width: String(Math.round(share * 1000) / 10), height: "10", rx: "2" }));
  return el("span", null, bar, " ", `${spent.usd} / ${cap.usd}`);
}

function upstreamTable(upstreams, key) {
  if (!upstreams.length) return el("p", { class: "empty" }, "no upstreams configured");
  const rows = upstreams.map((up) => el("tr", { "data-upstream": up.name },
    el("th", { scope: "row" }, up.name),
    el("td", { class: "state-" + up.state.replace(/ /g, "-") }, up.state,
      up.reason ? el("span", { class: "why" }, up.reason + (up.retry_in_s ? ` (retry in ${up.retry_in_s} s)` : "")) : null),
    el("td", { class: "num" }, up.restarts),
    el("td", null, up.era || "not chosen yet"),
    el("td", { class: "num" }, up.tools === null || up.tools === undefined ? "not listed yet" : up.tools)));
  return table([["Upstream"], ["State"], ["Restarts", "num"], ["Era"], ["Tools", "num"]], rows, "Upstreams", key);
}

function providerTable(providers, key) {
  if (!providers.length) return el("p", { class: "empty" }, "no providers configured");
  const parts = [];
  const capabilities = [...new Set(providers.map((p) => p.capability))];
  for (const capability of capabilities) {
    const mine = providers.filter((p) => p.capability === capability);
    const strategy = mine[0].strategy;
    parts.push(el("h4", null, `${capability} (strategy: ${strategy})`));
    const off = mine.filter((p) => !p.on);
    const rows = mine.filter((p) => p.on).map((p) => {
      const cooling = p.cooldown_until ? el("span", { class: "cooldown", "data-until": p.cooldown_until },
        "cooling down " + countdown(p.cooldown_until)) : null;
      return el("tr", { "data-provider": p.name, "data-capability": capability },
        el("td", { class: "num" }, p.place === null ? "–" : p.place),
        el("th", { scope: "row" }, p.name),
        el("td", { class: "on" }, cooling ? "" : "on", cooling, p.why ? el("span", { class: "why" }, p.why) : null),
        el("td", { class: "num" }, p.price.micros ? p.price.usd : "free"),
        el("td", null, p.daily_budget && p.spent_today ? budgetBar(p.spent_today, p.daily_budget)
          : (p.spent_today && p.spent_today.micros ? p.spent_today.usd : "no cap")),
        el("td", { class: "num" }, p.free_left === null ? "–" : `${p.free_left} of ${p.free_quota_monthly}`),
        el("td", { class: "num" }, ms(p.p50_ms)),
        el("td", { class: "num" + (p.errors_15m ? " outcome-bad" : "") }, p.errors_15m));
    });
    if (rows.length) {
      parts.push(table([["#", "num"], ["Provider"], ["State"], ["Price", "num"], ["Spend today"],
        ["Free left", "num"], ["p50", "num"], ["Errors 15 min", "num"]], rows, `${capability} providers`, key));
    } else {
      parts.push(el("p", { class: "empty" }, `no ${capability} provider is on`));
    }
    if (off.length) {
      parts.push(el("details", { class: "off-list", "data-key": `off:${key}:${capability}` },
        el("summary", null, `${off.length} off`),
        el("ul", null, ...off.map((p) => el("li", { "data-provider": p.name, "data-capability": capability },
          el("span", { class: "off" }, p.name), `: ${p.why}`)))));
    }
  }
  return el("div", null, ...parts);
}

function outcomeClass(outcome) {
  return outcome === "ok" || outcome === "cached" ? "outcome-" + outcome : "outcome-bad";
}

function callTable(calls, key) {
  if (!calls.length) return el("p", { class: "empty" }, "no calls yet");
  const rows = calls.map((call) => {
    const attempts = call.attempts.length
      ? el("details", { "data-key": `call:${key}:${call.id}` }, el("summary", null, `${call.attempts.length} attempt${call.attempts.length > 1 ? "s" : ""}`),
        el("ul", null, ...call.attempts.map((a) => el("li", null,
          `${a.provider}: `, el("span", { class: outcomeClass(a.outcome) }, a.outcome),
          `, ${ms(a.latency_ms)}, ${a.free_quota ? "free quota" : a.cost.usd}` + (a.retries ? `, ${a.retries} retries` : "")))))
      : el("span", { class: "muted" }, "none");
    return el("tr", { "data-call": call.tool },
      el("td", { class: "wide" }, clock(call.at)),
      el("th", { scope: "row" }, call.tool),
      el("td", { class: "wide" }, call.capability || "–"),
      el("td", null, call.provider || "–"),
      el("td", { class: outcomeClass(call.outcome) }, call.outcome),
      el("td", null, attempts),
      el("td", { class: "num cost" }, call.cost.usd),
      el("td", { class: "num" }, ms(call.latency_ms)),
      el("td", { class: "num" }, bytes(call.cut_bytes)));
  });
  return table([["Time", "wide"], ["Tool"], ["Capability", "wide"], ["Provider"], ["Outcome"], ["Attempts"],
    ["Cost", "num"], ["Latency", "num"], ["Cut", "num"]], rows, "Recent calls", key);
}

function serveCard(serve) {
  const who = [`pid ${serve.pid}`, serve.replica ? `replica ${serve.replica}` : null, serve.transport,
    serve.state ? `shared state ${serve.state}` : null].filter(Boolean);
  const key = String(serve.pid);
  return el("article", { class: "serve", "aria-label": `serve ${serve.pid}`, "data-pid": key },
    el("h3", null, `serve ${who.join(" · ")} · `, el("span", { class: "as-of" }, `as of ${clock(serve.updated_at)}`)),
    el("h4", null, "Upstreams"), upstreamTable(serve.upstreams, key),
    el("h4", null, "Providers"), providerTable(serve.providers, key),
    el("h4", null, serve.calls_total === null ? `Your last calls (${serve.calls.length})`
      : `Last calls (${serve.calls.length} of ${serve.calls_total} since start)`), callTable(serve.calls, key));
}

function monthChart(month, scope) {
  const box = document.getElementById("month-chart");
  const summary = document.getElementById("month-summary");
  if (!month) {
    summary.textContent = scope === "operator" ? "the month's totals are every operator's: shown to the proxy's admin"
      : "the usage ledger could not be read (or FRUGAL_STATS=off)";
    box.replaceChildren();
    return;
  }
  summary.textContent = `${month.month}: ${month.calls} calls, paid ${month.paid.usd}, the premium route ` +
    `${month.rack.usd}, saved ${month.saved.usd}`;
  if (!month.days.length) {
    box.replaceChildren(el("p", { class: "empty" }, "no calls this month yet"));
    return;
  }
  const [year, mon] = month.month.split("-").map(Number);
  const count = new Date(Date.UTC(year, mon, 0)).getUTCDate();
  const byDay = new Map(month.days.map((d) => [d.day, d]));
  const top = Math.max(1, ...month.days.map((d) => Math.abs(d.saved.micros)));
  const width = 20 * count, height = 120, base = 100;
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `savings per day in ${month.month}` });
  chart.append(svg("line", { class: "axis", x1: "0", x2: String(width), y1: String(base), y2: String(base) }));
  for (let n = 1; n <= count; n++) {
    const day = `${month.month}-${String(n).padStart(2, "0")}`;
    const found = byDay.get(day);
    const x = (n - 1) * 20 + 3;
    if (found) {
      const h = Math.max(1, Math.round((Math.abs(found.saved.micros) / top) * 90));
      const negative = found.saved.micros < 0;
      chart.append(svg("rect", { class: negative ? "bar negative" : "bar", x: String(x), width: "14",
        y: String(negative ? base : base - h), height: String(h), "data-day": day,
        "data-saved-micros": String(found.saved.micros), "data-calls": String(found.calls) },
        svg("title", {}, `${day}: ${found.calls} calls, paid ${found.paid.usd}, premium ${found.rack.usd}, saved ${found.saved.usd}`)));
    }
    if (n === 1 || n % 5 === 0) chart.append(svg("text", { x: String(x), y: "116" }, String(n)));
  }
  box.replaceChildren(chart);
}

function replicas(list) {
  const body = document.getElementById("replicas-body");
  if (list === null || list === undefined) {
    body.replaceChildren(el("p", { class: "empty" }, "one process: the shared state backend (redis) is off"));
    return;
  }
  if (!Array.isArray(list)) {
    body.replaceChildren(el("p", { class: "empty why" }, "replicas unknown: Redis unreachable"));
    return;
  }
  if (!list.length) {
    body.replaceChildren(el("p", { class: "empty" }, "no replica has checked in yet"));
    return;
  }
  body.replaceChildren(table([["Replica"], ["Last seen"]], list.map((r) =>
    el("tr", { "data-replica": r.replica }, el("th", { scope: "row" }, r.replica + (r.self ? " (this one)" : "")),
      el("td", null, clock(r.seen_at)))),
    "Replicas", "fleet"));
}

function keyed(selector) {
  return new Map([...document.querySelectorAll(selector)].map((node) => [node.getAttribute("data-key"), node]));
}

function held() {
  // What the reader has done to the page that a redraw must not undo: open details, scrolled
  // regions, the focused element (named by the nearest element with a data-key).
  const active = document.activeElement;
  const holder = active && active !== document.body ? active.closest("[data-key]") : null;
  return {
    open: new Set([...keyed("details[open][data-key]").keys()]),
    scrolled: new Map([...keyed(".scroll[data-key]")].map(([key, node]) => [key, [node.scrollLeft, node.scrollTop]])),
    focus: holder ? { key: holder.getAttribute("data-key"), summary: active.tagName === "SUMMARY" } : null,
  };
}

function giveBack(state) {
  for (const [key, node] of keyed("details[data-key]")) if (state.open.has(key)) node.open = true;
  for (const [key, node] of keyed(".scroll[data-key]")) {
    const at = state.scrolled.get(key);
    if (at) [node.scrollLeft, node.scrollTop] = at;
  }
  if (state.focus) {
    const holder = keyed("[data-key]").get(state.focus.key);
    const target = holder && (state.focus.summary ? holder.querySelector("summary") : holder);
    if (target && document.activeElement !== target) target.focus({ preventScroll: true });
  }
}

function shownOf(data) {
  // The answer less what changes at every poll (its clocks): equal, the page already shows it.
  // A cooldown's seconds left shrink at every poll; the tick() counts them down from its end.
  const providers = (list) => list.map((p) => ({ ...p, cooldown_s: null,
    cooldown_until: p.cooldown_until ? Math.round(p.cooldown_until) : null }));
  return JSON.stringify({ ...data, generated_at: 0,
    serves: data.serves.map((s) => ({ ...s, updated_at: 0, providers: providers(s.providers || []) })) });
}

function render(data) {
  const shown = shownOf(data);
  if (shown === drawn) {
    for (const serve of data.serves) {
      const node = document.querySelector(`article[data-pid="${Number(serve.pid)}"] .as-of`);
      if (node) node.textContent = `as of ${clock(serve.updated_at)}`;
    }
    return;
  }
  const state = held();
  const body = document.getElementById("serves-body");
  body.replaceChildren(...(data.serves.length ? data.serves.map(serveCard)
    : [el("p", { class: "empty" }, "no frugal-proxy serve is running")]));
  monthChart(data.month, data.scope);
  replicas(data.replicas);
  giveBack(state);
  drawn = shown;
  document.body.setAttribute("data-renders", String(++renders));
}

async function poll() {
  const live = document.getElementById("live");
  if (!paused) {
    try {
      const reply = await fetch("/ui/data", { cache: "no-store", credentials: "same-origin" });
      if (!reply.ok) throw new Error(`/ui/data answered ${reply.status}`);
      last = await reply.json();
      offset = last.generated_at - Date.now() / 1000;
      render(last);
      document.body.setAttribute("data-polls", String(++polls));
      live.className = "";
      live.textContent = `live · updated ${clock(last.generated_at)}`;
    } catch (error) {
      live.className = "error";
      live.textContent = `not updating: ${error.message}`;
    }
  }
  setTimeout(poll, POLL_MS);
}

function tick() {
  for (const node of document.querySelectorAll(".cooldown[data-until]")) {
    node.textContent = "cooling down " + countdown(Number(node.getAttribute("data-until")));
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const button = document.getElementById("pause");
  button.addEventListener("click", () => {
    paused = !paused;
    button.setAttribute("aria-pressed", String(paused));
    button.textContent = paused ? "Resume updates" : "Pause updates";
  });
  setInterval(tick, 1000);
  poll();
});
