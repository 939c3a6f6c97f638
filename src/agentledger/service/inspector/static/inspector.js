// agentledger inspector: live updates through the service's follow stream (server-sent events).
// A section with data-follow opens an EventSource on it. On each committed record it either
// appends the new rows (data-append: a fragment of records after the last shown position) or
// re-fetches a fragment (data-refresh, optionally only for data-refresh-types). Fragments are
// server-rendered and escaped; this script never builds markup from record data (it sets
// text only). It also shows times in the viewer's zone (UTC on hover), keeps the type filter's
// counts live, and unfolds every payload on request.
"use strict";

(function () {
  const live = document.getElementById("live");
  const say = (text) => { if (live) live.textContent = text; };

  // Times: rendered in UTC by the server; shown here in the viewer's zone, UTC on hover.
  const pad = (n, w) => String(n).padStart(w || 2, "0");
  function localize(root) {
    root.querySelectorAll("time[datetime]").forEach((el) => {
      const at = new Date(el.getAttribute("datetime"));
      if (isNaN(at)) return;
      el.textContent = at.getFullYear() + "-" + pad(at.getMonth() + 1) + "-" + pad(at.getDate()) + " " +
        pad(at.getHours()) + ":" + pad(at.getMinutes()) + ":" + pad(at.getSeconds()) + "." + pad(at.getMilliseconds(), 3);
      el.title = el.getAttribute("datetime") + " (UTC)";
      el.dataset.local = "yes";
    });
  }
  localize(document);

  // The record type filter's counts follow the log.
  function count(type) {
    const fieldset = document.querySelector("[data-counts]");
    if (!fieldset || !type) return;
    let label = Array.from(fieldset.querySelectorAll("label[data-type]")).find((l) => l.dataset.type === type);
    if (!label) {
      label = document.createElement("label");
      label.dataset.type = type;
      const box = document.createElement("input");
      box.type = "checkbox"; box.name = "type"; box.value = type;
      const number = document.createElement("span");
      number.className = "count"; number.textContent = "0";
      label.append(box, " " + type + " ", number);
      fieldset.appendChild(label);
    }
    const number = label.querySelector(".count");
    number.textContent = String(Number(number.textContent || "0") + 1);
  }

  document.querySelectorAll("[data-unfold]").forEach((button) => {
    button.addEventListener("click", () => {
      const folded = Array.from(document.querySelectorAll("details.payload"));
      const open = folded.some((d) => !d.open);
      folded.forEach((d) => { d.open = open; });
      button.textContent = open ? "Fold all" : "Unfold all";
    });
  });

  // A child run's steps, unfolded in place in its parent's waterfall (rendered, hidden).
  document.addEventListener("click", (event) => {
    const button = event.target.closest ? event.target.closest("button[data-expand]") : null;
    if (!button) return;
    const open = button.getAttribute("aria-expanded") !== "true";
    document.querySelectorAll("tr[data-child-of]").forEach((row) => {
      if (row.dataset.childOf === button.dataset.expand) row.hidden = !open;
    });
    button.setAttribute("aria-expanded", open ? "true" : "false");
    button.textContent = open ? "hide its steps" : "show its steps";
  });

  async function fragment(url) {
    const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } });
    if (!response.ok) throw new Error(url + ": " + response.status);
    const doc = new DOMParser().parseFromString(await response.text(), "text/html");
    return doc.body;
  }

  // Run one task at a time; a request arriving meanwhile runs once more afterwards.
  function serial(task) {
    let running = false, again = false;
    return async function run() {
      if (running) { again = true; return; }
      running = true;
      try {
        do { again = false; await task(); } while (again);
      } catch (error) {
        say("Live update failed: " + error.message);
      } finally { running = false; }
    };
  }

  function appender(section) {
    const list = section.querySelector("ol.records");
    let position = list.dataset.position || "";
    return serial(async function () {
      const url = new URL(section.dataset.append, location.href);
      url.searchParams.set("after", position);
      const body = await fragment(url);
      const rows = body.querySelector("ol.records");
      if (!rows) return;
      const added = Array.from(rows.children);
      for (const row of added) { list.appendChild(document.adoptNode(row)); localize(row); }
      if (rows.dataset.position) position = rows.dataset.position;
      if (added.length) {
        const empty = section.querySelector(".empty");
        if (empty) empty.remove();
        say(added.length + " new record" + (added.length > 1 ? "s" : ""));
      }
    });
  }

  function refresher(holder) {
    const target = holder.querySelector("[data-refresh-target]");
    return serial(async function () {
      const body = await fragment(holder.dataset.refresh);
      // Keep open <details> open across a refresh.
      const open = new Set(Array.from(target.querySelectorAll("details[open]"), (d) => d.closest("[data-index]")?.dataset.index + ":" + d.className));
      target.replaceChildren(...Array.from(body.childNodes, (n) => document.adoptNode(n)));
      target.querySelectorAll("details").forEach((d) => {
        if (open.has(d.closest("[data-index]")?.dataset.index + ":" + d.className)) d.open = true;
      });
      localize(target);
    });
  }

  function follow(section) {
    const updates = [];
    if (section.dataset.append) updates.push({ run: appender(section), types: null });
    const holders = [section, ...document.querySelectorAll("[data-refresh]")];
    for (const holder of new Set(holders)) {
      if (!holder.dataset.refresh) continue;
      const types = holder.dataset.refreshTypes ? new Set(holder.dataset.refreshTypes.split(" ")) : null;
      updates.push({ run: refresher(holder), types: types });
    }
    const source = new EventSource(section.dataset.follow);
    let timer = null;
    const pending = new Set();
    source.addEventListener("open", () => say("Live: following new records"));
    source.addEventListener("error", () => say("Live: connection lost, reconnecting"));
    const changed = (event) => {
      let type = "";
      try { type = JSON.parse(event.data).type; } catch (_) { /* still a change */ }
      if (event.type === "record") count(type);
      for (const update of updates) {
        if (!update.types || update.types.has(type)) pending.add(update);
      }
      clearTimeout(timer);
      timer = setTimeout(() => {
        const now = Array.from(pending);
        pending.clear();
        now.forEach((update) => update.run());
      }, 120);
    };
    source.addEventListener("record", changed);
    source.addEventListener("change", changed);
    document.body.dataset.following = "yes";
    window.addEventListener("pagehide", () => source.close());
  }

  document.querySelectorAll("[data-follow]").forEach(follow);
})();
