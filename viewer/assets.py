"""The report's stylesheet and script, inlined into every report (no files, no network)."""

CSS = """
:root { --ink:#1F2933; --muted:#616E7C; --line:#E4E7EB; --bg:#F5F7FA; --accent:#3366A8; }
* { box-sizing: border-box; }
body { margin:0; font-family: Inter, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif;
       color:var(--ink); background:var(--bg); font-size:14px; }
header { background:#fff; border-bottom:1px solid var(--line); padding:14px 28px 0; \
position:sticky; top:0; z-index:10; }
header h1 { margin:0; font-size:18px; font-weight:600; }
header .meta { color:var(--muted); font-size:12px; margin:4px 0 10px; }
nav { display:flex; gap:2px; }
nav button { border:0; background:none; padding:9px 16px; font-size:14px; color:var(--muted); cursor:pointer;
             border-bottom:3px solid transparent; font-family:inherit; }
nav button:hover { color:var(--ink); }
nav button.active { color:var(--accent); border-bottom-color:var(--accent); font-weight:600; }
main { padding:20px 28px 40px; max-width:1500px; }
.page { display:none; } .page.active { display:block; }
section { background:#fff; border:1px solid var(--line); border-radius:8px; padding:16px 20px; margin-bottom:18px; }
section h2 { font-size:15px; margin:0 0 10px; font-weight:600; }
.note { color:var(--muted); font-size:12.5px; margin:-4px 0 10px; }
table + .note { margin-top:10px; }
.absent { color:var(--muted); font-style:italic; }
.cards { display:flex; flex-wrap:wrap; gap:12px; }
.card { background:var(--bg); border-radius:6px; padding:10px 16px; min-width:140px; }
.card-value { font-size:20px; font-weight:600; }
.card-label { color:var(--muted); font-size:12px; }
table.data { border-collapse:collapse; width:100%; font-size:13px; }
table.data th, table.data td { padding:5px 10px; border-bottom:1px solid var(--line); text-align:left;
                               vertical-align:top; }
table.data th { color:var(--muted); font-weight:600; background:#FAFBFC; position:sticky; top:0; }
table.data td.num, table.data th.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
table.data td { overflow-wrap:anywhere; } table.data td.num { overflow-wrap:normal; }
.sortable th { cursor:pointer; user-select:none; } .sortable th.sorted-asc::after { content:' \\25B2'; }
.sortable th.sorted-desc::after { content:' \\25BC'; }
.table-tools { display:flex; gap:10px; align-items:center; margin-bottom:8px; color:var(--muted); font-size:12.5px; }
.table-tools input, .table-tools select, .window-tools select { padding:5px 8px; border:1px solid var(--line);
             border-radius:4px; font:inherit; color:var(--ink); }
.table-tools input { width:280px; }
.table-scroll { max-height:560px; overflow:auto; border:1px solid var(--line); border-radius:4px; }
.verdict { font-size:16px; font-weight:600; padding:10px 14px; border-left:4px solid var(--accent);
           background:#EEF3FA; border-radius:4px; margin-bottom:12px; }
.sev { display:inline-block; padding:1px 8px; border-radius:10px; font-size:11.5px; font-weight:600; color:#fff; \
white-space:nowrap; }
.sev-high { background:#C0392B; } .sev-medium { background:#E39B3B; } .sev-low { background:#6BA368; }
.sev-info { background:#7A8B99; }
.grid2 { display:grid; grid-template-columns: 1fr 1fr; gap:18px; }
.grid2 > section { margin-bottom:0; }
.window { display:none; } .window.active { display:block; }
.window-tools { margin-bottom:8px; color:var(--muted); font-size:12.5px; }
code { background:var(--bg); padding:1px 5px; border-radius:3px; font-size:12.5px; }
@media (max-width: 1000px) { .grid2 { grid-template-columns: 1fr; } }
"""

JS = """
(function () {
  "use strict";
  var figures = JSON.parse(document.getElementById("pv-figures").textContent);
  var config = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"]};

  function renderVisible(root) {
    root.querySelectorAll("div.plot:not([data-rendered])").forEach(function (div) {
      if (div.offsetParent === null) { return; }
      var spec = figures[div.dataset.fig];
      div.dataset.rendered = "1";
      Plotly.newPlot(div, spec.data, spec.layout, config).then(function () {
        if (div.dataset.lod) { zoomLevels(div); }
        div.dataset.done = "1";
      });
    });
  }

  function bytes(text) {
    var raw = atob(text), out = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) { out[i] = raw.charCodeAt(i); }
    return out;
  }

  // The timeline's whole-run heatmap: swap in the finest zoom level that keeps ~1,200 bins in view.
  function zoomLevels(div) {
    var lod = JSON.parse(document.getElementById(div.dataset.lod).textContent);
    var note = document.getElementById(lod.note), cache = {}, busy = false;
    function level(k) {
      if (!cache[k]) {
        var l = lod.levels[k];
        var raw = bytes(l.started).buffer;
        cache[k] = {bins: l.bins, busy: bytes(l.busy), started: l.wide ? new Uint32Array(raw) : new Uint16Array(raw)};
      }
      return cache[k];
    }
    function redraw(r0, r1) {
      var t0 = lod.t0, t1 = lod.t1, span = t1 - t0;
      if (!(r1 > r0)) { r0 = t0; r1 = t1; }
      var want = Math.ceil(Math.log2(Math.max(1, span / (r1 - r0))));
      var k = Math.max(0, Math.min(lod.levels.length - 1, want));
      var l = level(k), width = span / l.bins;
      var i0 = Math.max(0, Math.floor((r0 - t0) / width) - 1), i1 = Math.min(l.bins, Math.ceil((r1 - t0) / width) + 1);
      var x = [], z = [], c = [], events = 0;
      for (var i = i0; i < i1; i++) { x.push(t0 + (i + 0.5) * width); }
      for (var lane = 0; lane < lod.lanes; lane++) {
        var zr = [], cr = [], base = lane * l.bins;
        for (var j = i0; j < i1; j++) { zr.push(l.busy[base + j] / 2.55); cr.push(l.started[base + j]); \
events += l.started[base + j]; }
        z.push(zr); c.push(cr);
      }
      var started = performance.now();
      return Plotly.restyle(div, {x: [x], z: [z], customdata: [c]}, [0]).then(function () {
        div.dataset.redrawMs = (performance.now() - started).toFixed(1);
        div.dataset.level = k;
        if (note) {
          note.textContent = "zoom level " + k + ": " + l.bins.toLocaleString() + " bins of " +
            (width < 1 ? (width * 1000).toPrecision(3) + " µs" : width.toPrecision(3) + " ms") + "; " +
            (i1 - i0).toLocaleString() + " bins in view aggregate " + events.toLocaleString() + " events started there";
        }
      });
    }
    div.on("plotly_relayout", function (ev) {
      if (busy) { return; }
      var r0 = ev["xaxis.range[0]"], r1 = ev["xaxis.range[1]"];
      if (r0 === undefined && ev["xaxis.range"]) { r0 = ev["xaxis.range"][0]; r1 = ev["xaxis.range"][1]; }
      if (r0 === undefined && !ev["xaxis.autorange"]) { return; }
      busy = true;
      var started = performance.now();
      redraw(Number(r0), Number(r1)).then(function () {
        div.dataset.zoomMs = (performance.now() - started).toFixed(1);
        busy = false;
      }, function () { busy = false; });
    });
  }

  function show(key) {
    document.querySelectorAll("nav button").forEach(function (b) {
      b.classList.toggle("active", b.dataset.page === key);
    });
    document.querySelectorAll(".page").forEach(function (p) {
      p.classList.toggle("active", p.id === "page-" + key);
    });
    renderVisible(document.getElementById("page-" + key));
    if (history.replaceState) { history.replaceState(null, "", "#" + key); }
  }

  document.querySelectorAll("nav button").forEach(function (b) {
    b.addEventListener("click", function () { show(b.dataset.page); });
  });

  document.querySelectorAll("select[data-windows]").forEach(function (sel) {
    sel.addEventListener("change", function () {
      var group = document.getElementById(sel.dataset.windows);
      group.querySelectorAll(".window").forEach(function (w) {
        w.classList.toggle("active", w.dataset.window === sel.value);
      });
      renderVisible(group);
    });
  });

  function cellText(value, kind) {
    if (kind === "int") { return typeof value === "number" ? value.toLocaleString() : ""; }
    if (kind === "num") {
      if (typeof value !== "number") { return ""; }
      return Math.abs(value) >= 100 ? value.toFixed(1) : Math.abs(value) >= 1 ? value.toFixed(3) : value.toPrecision(3);
    }
    return String(value);
  }

  function sortableTable(holder) {
    var payload = JSON.parse(document.getElementById(holder.dataset.source).textContent);
    var cols = payload.columns, kinds = payload.kinds, rows = payload.rows, limit = payload.limit;
    var state = {key: payload.sort, desc: true, text: "", device: ""};
    var input = holder.querySelector("input"), deviceSel = holder.querySelector("select");
    var count = holder.querySelector(".count"), table = holder.querySelector("table");
    var thead = table.querySelector("thead"), tbody = table.querySelector("tbody");
    var tr = document.createElement("tr");
    cols.forEach(function (c, i) {
      var th = document.createElement("th");
      th.textContent = c; th.className = kinds[i] !== "text" ? "num" : "";
      th.addEventListener("click", function () {
        if (state.key === i) { state.desc = !state.desc; } else { state.key = i; state.desc = kinds[i] !== "text"; }
        draw();
      });
      tr.appendChild(th);
    });
    thead.appendChild(tr);
    function draw() {
      var text = state.text.toLowerCase(), dev = state.device, k = state.key, sign = state.desc ? -1 : 1;
      var shown = rows.filter(function (r) {
        return (!dev || r[payload.device] === dev) &&
               (!text || r.some(function (v) { return String(v).toLowerCase().indexOf(text) >= 0; }));
      });
      shown.sort(function (a, b) { return a[k] < b[k] ? -sign : a[k] > b[k] ? sign : 0; });
      tbody.textContent = "";
      var frag = document.createDocumentFragment();
      shown.slice(0, limit).forEach(function (r) {
        var row = document.createElement("tr");
        r.forEach(function (v, i) {
          var td = document.createElement("td");
          td.textContent = cellText(v, kinds[i]); td.className = kinds[i] !== "text" ? "num" : "";
          row.appendChild(td);
        });
        frag.appendChild(row);
      });
      tbody.appendChild(frag);
      thead.querySelectorAll("th").forEach(function (th, i) {
        th.className = (kinds[i] !== "text" ? "num " : "") + \
(i === k ? (state.desc ? "sorted-desc" : "sorted-asc") : "");
      });
      count.textContent = "showing " + Math.min(limit, shown.length).toLocaleString() + " of " +
        shown.length.toLocaleString() + " matching rows (" + rows.length.toLocaleString() + " in all)";
    }
    input.addEventListener("input", function () { state.text = input.value; draw(); });
    if (deviceSel) { deviceSel.addEventListener("change", function () { state.device = deviceSel.value; draw(); }); }
    draw();
  }
  document.querySelectorAll("div.sortable").forEach(sortableTable);

  var first = (location.hash || "").slice(1);
  var keys = Array.prototype.map.call(document.querySelectorAll("nav button"), function (b) { return b.dataset.page; });
  show(keys.indexOf(first) >= 0 ? first : keys[0]);
  window.profview = {show: show, renderVisible: renderVisible};
})();
"""
