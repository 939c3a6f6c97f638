// agentledger inspector: live updates through the service's follow stream (server-sent events).
// A section with data-follow opens an EventSource on it. On each committed record it either
// appends the new rows (data-append: a fragment of records after the last shown position) or
// re-fetches a fragment (data-refresh, optionally only for data-refresh-types). Fragments are
// server-rendered and escaped; this script never builds markup from record data.
"use strict";

(function () {
  const live = document.getElementById("live");
  const say = (text) => { if (live) live.textContent = text; };

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
      for (const row of added) list.appendChild(document.adoptNode(row));
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
    source.addEventListener("record", (event) => {
      let type = "";
      try { type = JSON.parse(event.data).type; } catch (_) { /* still a change */ }
      for (const update of updates) {
        if (!update.types || update.types.has(type)) pending.add(update);
      }
      clearTimeout(timer);
      timer = setTimeout(() => {
        const now = Array.from(pending);
        pending.clear();
        now.forEach((update) => update.run());
      }, 120);
    });
    document.body.dataset.following = "yes";
    window.addEventListener("pagehide", () => source.close());
  }

  document.querySelectorAll("[data-follow]").forEach(follow);
})();
