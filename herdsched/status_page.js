(function(){
  const body = document.body, base = body.dataset.api;
  const csrfHeader = body.dataset.csrfHeader, csrfToken = body.dataset.csrfToken;
  const form = document.getElementById("filters"), rows = document.getElementById("rows");
  const every = Number(body.dataset.refresh || 5) * 1000;
  function rel(ms){
    const s = Math.round(Math.abs(ms) / 1000); let t;
    if (s < 60) t = s + " s"; else if (s < 3600) t = Math.round(s / 60) + " min";
    else if (s < 172800) t = Math.round(s / 3600) + " h"; else t = Math.round(s / 86400) + " days";
    return ms >= 0 ? "in " + t : t + " ago";
  }
  function fmt(el){
    const d = new Date(el.getAttribute("datetime")); if (isNaN(d)) return;
    const now = new Date();
    const time = d.toLocaleTimeString([], {hour: "2-digit", minute: "2-digit", second: "2-digit"});
    const day = d.toDateString() === now.toDateString() ? "" :
      d.toLocaleDateString([], d.getFullYear() === now.getFullYear() ?
        {weekday: "short", day: "numeric", month: "short"} :
        {day: "numeric", month: "short", year: "numeric"}) + " ";
    el.textContent = day + time + " (" + rel(d - now) + ")"; el.title = d.toString();
  }
  function times(root){
    root.querySelectorAll("time[datetime]").forEach(fmt);
    root.querySelectorAll(".run[data-at]").forEach(function(el){  // "failed · <time> · 0.4 s"
      const d = new Date(el.dataset.at), parts = el.title.split(" · ");
      if (!isNaN(d) && parts.length > 1) { parts[1] = d.toString(); el.title = parts.join(" · "); }
    });
    root.querySelectorAll("[data-browser-text]").forEach(function(el){
      el.textContent = el.dataset.browserText;  // the server's zone until now
    });
  }
  function headers(json){
    const h = {"Accept": "application/json"};
    if (json) h["Content-Type"] = "application/json";
    if (csrfToken) h[csrfHeader] = csrfToken;
    return h;
  }
  function params(){
    const p = new URLSearchParams(new FormData(form));
    for (const [k, v] of Array.from(p.entries())) { if (!v || (k === "page" && v === "1")) p.delete(k); }
    return p;
  }
  function setHTML(el, html){ if (el.__src !== html) { el.innerHTML = html; el.__src = html; } }
  function keyOf(tr){ return tr.dataset.key; }
  function detailOf(tr){
    const next = tr.nextElementSibling;
    return next && next.classList.contains("detail") && next.dataset.for === keyOf(tr) ? next : null;
  }
  function makeRow(data, columns){
    const tr = document.createElement("tr");
    tr.dataset.agent = data.agent; tr.dataset.schedule = data.name; tr.dataset.key = data.key;
    for (const name of columns) {  // the header's order (JSON objects may come sorted)
      const td = document.createElement("td"); td.className = name; tr.appendChild(td);
    }
    const td = document.createElement("td"); td.className = "actions"; td.innerHTML = data.actions;
    tr.appendChild(td);
    return tr;
  }
  function apply(data){
    for (const [name, n] of Object.entries(data.counts)) {
      const el = document.querySelector("#counts [data-count='" + name + "'] b");
      if (el) el.textContent = n;
    }
    document.getElementById("summary").textContent = data.summary;
    setHTML(document.getElementById("meta"), data.meta);
    form.elements.page.value = data.page;
    document.getElementById("prev").disabled = data.page <= 1;
    document.getElementById("next").disabled = data.page >= data.pages;
    const old = new Map();
    rows.querySelectorAll("tr[data-key]").forEach(function(tr){ old.set(keyOf(tr), tr); });
    const empty = rows.querySelector("tr.empty"); if (empty) empty.remove();
    let anchor = null;
    for (const item of data.rows) {
      let tr = old.get(item.key);
      if (tr) old.delete(item.key); else tr = makeRow(item, data.columns);
      tr.className = item.cls;
      for (const [name, html] of Object.entries(item.cells)) setHTML(tr.querySelector("td." + name), html);
      const pause = tr.querySelector("[data-action=pause]"), resume = tr.querySelector("[data-action=resume]");
      if (pause) pause.hidden = !item.enabled;
      if (resume) resume.hidden = !item.resumable;
      const detail = detailOf(tr);
      const place = anchor ? anchor.nextElementSibling : rows.firstElementChild;
      if (place !== tr) rows.insertBefore(tr, place);
      anchor = tr;
      if (detail) { rows.insertBefore(detail, tr.nextElementSibling); anchor = detail; }
    }
    old.forEach(function(tr){ const d = detailOf(tr); if (d) d.remove(); tr.remove(); });
    if (!data.rows.length) {
      const tr = document.createElement("tr"); tr.className = "empty";
      tr.innerHTML = "<td colspan='10'>no schedules match</td>"; rows.appendChild(tr);
    }
    times(document);  // every "(in 4 min)" moves on, changed cells or not
  }
  // every filter or page change asks at once; an answer to an older request than the latest
  // is dropped (it would put back the page or filters the reader just left)
  let asked = 0, answered = 0;
  const stale = document.getElementById("stale");
  let shownAt = new Date();
  function notRefreshed(why, again){  // the page stays as it was: say so, and since when
    stale.textContent = "Not refreshed since " + shownAt.toLocaleTimeString() + ": " + why +
      " (" + (again || "tried again every " + every / 1000 + " s") + ")";
    stale.hidden = false;
  }
  // a server that hangs (a frozen host, a cut network) is given up on after two refreshes'
  // time, and said so, as one that refuses is
  const patience = 2 * every;
  async function refresh(){
    const mine = ++asked, giveUp = new AbortController();
    const timer = setTimeout(function(){ giveUp.abort(); }, patience);
    try {
      const p = params(); p.set("format", "json");
      const r = await fetch(location.pathname + "?" + p, {credentials: "same-origin", headers: headers(false), signal: giveUp.signal});
      const body = await r.json().catch(function(){ return null; });
      if (mine !== asked) return;
      if (r.ok && body) { apply(body); shownAt = new Date(); stale.hidden = true; }
      else if (giveUp.signal.aborted) throw new Error("gave up");
      else notRefreshed((body && body.error) || ("HTTP " + r.status));
    } catch (err) {
      if (mine !== asked) return;
      if (giveUp.signal.aborted) notRefreshed("the server did not answer within " + patience / 1000 + " s", "trying again");
      else notRefreshed("the server did not answer");
    }
    finally { clearTimeout(timer); answered = Math.max(answered, mine); }
  }
  function filtersChanged(resetPage){
    if (resetPage) form.elements.page.value = 1;
    const p = params(); history.replaceState(null, "", location.pathname + (p.toString() ? "?" + p : ""));
    refresh();
  }
  let typing = null;
  form.addEventListener("submit", function(e){ e.preventDefault(); filtersChanged(true); });
  form.addEventListener("change", function(e){ if (e.target.name !== "q") filtersChanged(true); });
  form.elements.q.addEventListener("input", function(){ clearTimeout(typing); typing = setTimeout(function(){ filtersChanged(true); }, 250); });
  document.getElementById("prev").addEventListener("click", function(){ form.elements.page.value = Math.max(1, Number(form.elements.page.value) - 1); filtersChanged(false); });
  document.getElementById("next").addEventListener("click", function(){ form.elements.page.value = Number(form.elements.page.value) + 1; filtersChanged(false); });
  document.getElementById("counts").addEventListener("click", function(e){
    const b = e.target.closest("button[data-count]"); if (!b) return;
    form.elements.status.value = b.dataset.count === "total" ? "" : b.dataset.count; filtersChanged(true);
  });
  function say(row, text, bad){
    const m = row.querySelector(".msg"); m.textContent = text; m.className = bad ? "msg bad" : "msg";
  }
  async function act(button){
    const row = button.closest("tr"), action = button.dataset.action;
    let url = base + "/schedule/" + encodeURIComponent(row.dataset.agent) + "/" + encodeURIComponent(row.dataset.schedule);
    const init = {method: "PATCH", credentials: "same-origin", headers: headers(true)};
    if (action === "run") { url += "/run"; init.method = "POST"; init.body = "{}"; }
    else { init.body = JSON.stringify({enabled: action === "resume"}); }
    button.disabled = true;
    try {
      const response = await fetch(url, init);
      const answer = await response.json().catch(function(){ return {}; });
      if (!response.ok) { say(row, answer.error || ("HTTP " + response.status), true); return; }
      if (action === "run") {
        say(row, (answer.queued ? "run queued for the active scheduler (" : "run started (") + answer.run_id + ")");
      } else {
        row.querySelector(".status").textContent = answer.status;
        row.querySelector("[data-action=pause]").hidden = !answer.enabled;
        row.querySelector("[data-action=resume]").hidden = answer.enabled;
        say(row, action === "pause" ? "paused" : "resumed");
      }
      refresh();
    } catch (err) { say(row, String(err), true); }
    finally { button.disabled = false; }
  }
  function field(box, label, text, pre){
    if (!text) return;
    const p = document.createElement(pre ? "div" : "p");
    const b = document.createElement("b"); b.textContent = label + ": "; p.appendChild(b);
    if (pre) { const x = document.createElement("pre"); x.textContent = text; p.appendChild(x); }
    else p.appendChild(document.createTextNode(text));
    box.appendChild(p);
  }
  async function detail(cell){
    const row = cell.closest("tr"), runId = cell.dataset.run;
    let tr = detailOf(row);
    if (!tr) {
      tr = document.createElement("tr"); tr.className = "detail"; tr.dataset.for = keyOf(row);
      tr.innerHTML = "<td colspan='10'></td>"; rows.insertBefore(tr, row.nextElementSibling);
    }
    const box = tr.firstElementChild; box.textContent = "loading run " + runId + "...";
    const url = base + "/schedule/" + encodeURIComponent(row.dataset.agent) + "/" + encodeURIComponent(row.dataset.schedule) + "/runs/" + encodeURIComponent(runId);
    try {
      const response = await fetch(url, {credentials: "same-origin", headers: headers(false)});
      const run = await response.json().catch(function(){ return {}; });
      box.textContent = "";
      const close = document.createElement("button"); close.type = "button"; close.textContent = "close";
      close.dataset.action = "close"; box.appendChild(close);
      if (!response.ok) {  // the API's own words: 401, 403, a run no longer kept (404), 503
        field(box, "run " + runId, run.error || ("HTTP " + response.status));
        box.lastChild.className = "bad"; return;
      }
      field(box, "run", run.run_id + " · " + run.trigger_type + " · " + run.status);
      field(box, "started", run.started_at ? new Date(run.started_at).toString() : "");
      field(box, "finished", run.finished_at ? new Date(run.finished_at).toString() : "");
      field(box, "output", run.output_summary, true);
      field(box, "error", run.error, true);
      field(box, "traceback", run.traceback, true);
    } catch (err) { box.textContent = String(err); }
  }
  rows.addEventListener("click", function(e){
    const button = e.target.closest("button[data-action]");
    if (button && button.dataset.action === "close") { button.closest("tr").remove(); return; }
    if (button) { act(button); return; }
    const cell = e.target.closest(".run[data-run]"); if (cell) detail(cell);
  });
  rows.addEventListener("keydown", function(e){
    const cell = e.target.closest(".run[data-run]");
    if (cell && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); detail(cell); }
  });
  times(document);
  // the relative times move on while a refresh is under way (or the page is stale) too
  setInterval(function(){ times(document); if (answered === asked) refresh(); }, every);
})();
