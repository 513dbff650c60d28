/* loadgen: per-stage LLM figures and charts against concurrency, for Locust's web UI.
 *
 * Two uses: injected into Locust's own page (charts shown under the "LLM stages"
 * tab's table while that tab is open), and the standalone page /loadgen/.
 * Polls ./loadgen/status.json every 2 s; no external libraries (plain SVG).
 * Any number of targets: one colour each, from status.json's "colours" (the run's order, the
 * reference first), and a per-concurrency table of output tok/s with the highest of them.
 */
(function () {
  "use strict";
  var BASE = (document.currentScript && document.currentScript.dataset.base) || ".";
  var STANDALONE = !!document.getElementById("loadgen-standalone");
  var COLORS = ["#3a68c4", "#e0641a", "#2a9d5c", "#c2378f", "#1f9bb0", "#8c5a2b", "#6b7d12", "#5b5fd6"];
  // (only when status.json has no "colours": loadgen/report/palette.py's palette is the one that counts)
  var CHARTS = [
    { key: "tokens_per_s", title: "Output tokens/s", series: [["tokens_per_s", ""]] },
    { key: "ttft", title: "TTFT p50 / p99 (ms)", series: [["ttft_p50", "p50"], ["ttft_p99", "p99"]] },
    { key: "itl", title: "ITL p50 / p99 (ms)", series: [["itl_p50", "p50"], ["itl_p99", "p99"]] },
    { key: "tokens_per_chunk", title: "Tokens per chunk (mean)", series: [["tokens_per_chunk", ""]] },
    { key: "accept_length", title: "Accept length (mean)", series: [["accept_length", ""]] }
  ];
  var SVGNS = "http://www.w3.org/2000/svg";
  var last = null;

  function el(tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function fmt(v, nd) {
    if (v === null || v === undefined || v === "") return "-";
    return Number(v).toFixed(nd === undefined ? 2 : nd);
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * p >= v) return steps[i] * p;
    return 10 * p;
  }

  function colourOf(st, t) {
    var c = st.colours && st.colours[t];
    return c || COLORS[Math.max(0, st.targets.indexOf(t)) % COLORS.length];
  }

  function legendRows(targets, x0, x1) {
    // [x, row] per target: left to right from x0 (after the title), wrapping at x1
    var out = [], x = x0, row = 0;
    targets.forEach(function (t) {
      var w = 22 + 6 * String(t).length;
      if (x + w > x1 && x > x0) { row += 1; x = 52; }
      out.push([x, row]);
      x += w;
    });
    return out;
  }

  function chart(spec, st) {
    var stages = st.stages, targets = st.targets, ladder = st.ladder;
    var legendX = 52 + 170, W = 380;
    var place = legendRows(targets, legendX, W - 12);
    var rows = place.length ? place[place.length - 1][1] + 1 : 1;
    var H = 230 + 12 * (rows - 1), L = 52, R = 12, T = 26 + 12 * (rows - 1), B = 34;
    var svg = el("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, "data-metric": spec.key,
                          "class": "loadgen-chart", style: "background:#fff;border:1px solid #ddd;margin:4px" });
    svg.appendChild(el("text", { x: L, y: 16, "font-size": 13, "font-family": "sans-serif", fill: "#222" }, spec.title));
    var cs = ladder.length ? ladder : [1];
    var xmin = Math.log(Math.min.apply(null, cs)), xmax = Math.log(Math.max.apply(null, cs));
    if (xmax === xmin) { xmin -= 0.5; xmax += 0.5; }
    var ymaxRaw = 0;
    stages.forEach(function (s) {
      spec.series.forEach(function (sr) { var v = s[sr[0]]; if (v !== null && v !== undefined && v > ymaxRaw) ymaxRaw = v; });
    });
    var ymax = niceMax(ymaxRaw * 1.05);
    function X(c) { return L + (Math.log(c) - xmin) / (xmax - xmin) * (W - L - R); }
    function Y(v) { return H - B - v / ymax * (H - T - B); }
    // axes and grid
    for (var i = 0; i <= 4; i++) {
      var yv = ymax * i / 4, yy = Y(yv);
      svg.appendChild(el("line", { x1: L, x2: W - R, y1: yy, y2: yy, stroke: "#eee" }));
      svg.appendChild(el("text", { x: L - 4, y: yy + 4, "text-anchor": "end", "font-size": 10, "font-family": "sans-serif", fill: "#555" },
                         yv >= 100 ? yv.toFixed(0) : yv.toFixed(yv >= 10 ? 1 : 2)));
    }
    cs.forEach(function (c) {
      var xx = X(c);
      svg.appendChild(el("line", { x1: xx, x2: xx, y1: T, y2: H - B, stroke: "#f3f3f3" }));
      svg.appendChild(el("text", { x: xx, y: H - B + 14, "text-anchor": "middle", "font-size": 10, "font-family": "sans-serif", fill: "#555" }, String(c)));
    });
    svg.appendChild(el("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", "font-size": 10, "font-family": "sans-serif", fill: "#555" }, "concurrency (log)"));
    svg.appendChild(el("line", { x1: L, x2: L, y1: T, y2: H - B, stroke: "#999" }));
    svg.appendChild(el("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#999" }));
    // series: one colour per target, dashed for p99
    targets.forEach(function (t, ti) {
      var color = colourOf(st, t), lx = place[ti][0], ly = 8 + 12 * place[ti][1];
      svg.appendChild(el("rect", { x: lx, y: ly, width: 10, height: 3, fill: color, "data-legend": t }));
      svg.appendChild(el("text", { x: lx + 14, y: ly + 5, "font-size": 10, "font-family": "sans-serif", fill: "#333" }, t));
      spec.series.forEach(function (sr, si) {
        var pts = stages.filter(function (s) { return s.target === t && s[sr[0]] !== null && s[sr[0]] !== undefined; })
                        .sort(function (a, b) { return a.concurrency - b.concurrency; });
        if (!pts.length) return;
        var d = pts.map(function (s, k) { return (k ? "L" : "M") + X(s.concurrency).toFixed(1) + "," + Y(s[sr[0]]).toFixed(1); }).join(" ");
        svg.appendChild(el("path", { d: d, fill: "none", stroke: color, "stroke-width": 1.8, "stroke-dasharray": si ? "4 3" : "" }));
        pts.forEach(function (s) {
          var c = el("circle", { cx: X(s.concurrency), cy: Y(s[sr[0]]), r: 3, fill: si ? "#fff" : color, stroke: color,
                                 "data-colour": color,
                                 "data-target": t, "data-c": s.concurrency, "data-series": sr[0], "data-v": s[sr[0]] });
          c.appendChild(el("title", {}, t + " C=" + s.concurrency + " " + (sr[1] || spec.title) + ": " + fmt(s[sr[0]])));
          svg.appendChild(c);
        });
      });
    });
    if (!stages.length) {
      svg.appendChild(el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", "font-size": 11, "font-family": "sans-serif", fill: "#999" }, "no finished stage yet"));
    }
    return svg;
  }

  function statusLine(st) {
    var done = st.stages.length, total = st.total_stages;
    var s = "loadgen ramp: " + done + "/" + total + " stages written";
    if (st.current) s += " — now " + st.current.target + " C=" + st.current.concurrency + " (" + st.current.phase + ", " + st.current.elapsed_s + " s)";
    else if (st.finished) s += st.aborted ? " — stopped" : " — finished";
    if (st.results) s += " — " + st.results;
    return s;
  }

  function swatch(colour) {
    var sq = document.createElement("span");
    sq.className = "loadgen-swatch";
    sq.setAttribute("data-colour", colour);
    sq.style.cssText = "display:inline-block;width:9px;height:9px;margin-right:4px;background:" + colour;
    return sq;
  }

  function bestTable(st) {
    // per C: every target's output tok/s and the highest (a reading of the means; the joint intervals
    // are loadgen crossover --from's)
    var rows = st.by_c || [];
    var t = document.createElement("table");
    t.className = "loadgen-best";
    t.style.cssText = "border-collapse:collapse;font:12px sans-serif;margin:6px 4px";
    var cap = t.createCaption();
    cap.textContent = "Output tok/s per C, the highest so far (means; the joint intervals: loadgen crossover --from)";
    cap.style.cssText = "text-align:left;padding:2px 0;color:#444;white-space:nowrap";
    var hr = t.insertRow();
    function th(text, colour) {
      var h = document.createElement("th");
      if (colour) h.appendChild(swatch(colour));
      h.appendChild(document.createTextNode(text));
      h.style.cssText = "padding:3px 8px;border-bottom:1px solid #999;text-align:right";
      hr.appendChild(h);
    }
    th("C");
    st.targets.forEach(function (x) { th(x, colourOf(st, x)); });
    th("highest");
    rows.forEach(function (row) {
      var r = t.insertRow();
      r.setAttribute("data-c", row.concurrency);
      var td = r.insertCell();
      td.textContent = String(row.concurrency);
      td.style.cssText = "padding:3px 8px;text-align:right";
      st.targets.forEach(function (x) {
        var v = row.tokens_per_s[x], cell = r.insertCell();
        cell.textContent = fmt(v, 1);
        cell.style.cssText = "padding:3px 8px;text-align:right" + (row.best === x ? ";font-weight:bold" : "");
      });
      var b = r.insertCell();
      b.className = "loadgen-best-cell";
      b.style.cssText = "padding:3px 8px;text-align:left";
      if (row.best) {
        b.setAttribute("data-best", row.best);
        b.appendChild(swatch(colourOf(st, row.best)));
        b.appendChild(document.createTextNode(row.best + (row.complete ? "" : " (so far)")));
      } else {
        b.textContent = "-";
      }
    });
    return t;
  }

  function table(st) {
    var cols = [["index", "#", 0], ["target", "target"], ["concurrency", "C", 0], ["ttft_p50", "TTFT p50 ms"], ["ttft_p99", "TTFT p99 ms"],
                ["itl_p50", "ITL p50 ms"], ["itl_p99", "ITL p99 ms"], ["tokens_per_s", "tok/s", 1], ["tokens_per_chunk", "tok/chunk"],
                ["accept_length", "accept len"], ["completed", "ok", 0], ["failed", "fail", 0]];
    var t = document.createElement("table");
    t.className = "loadgen-table";
    t.style.cssText = "border-collapse:collapse;font:12px sans-serif;margin:6px 0";
    var hr = t.insertRow();
    cols.forEach(function (c) { var th = document.createElement("th"); th.textContent = c[1]; th.style.cssText = "padding:3px 8px;border-bottom:1px solid #999;text-align:right"; hr.appendChild(th); });
    st.stages.forEach(function (s) {
      var r = t.insertRow();
      cols.forEach(function (c) {
        var td = r.insertCell(), v = s[c[0]];
        td.textContent = c[0] === "index" ? String(v + 1) : (typeof v === "string" ? v : fmt(v, c[2]));
        td.style.cssText = "padding:3px 8px;text-align:right";
        if (c[0] === "target") td.insertBefore(swatch(colourOf(st, v)), td.firstChild);
      });
    });
    return t;
  }

  function render(box, st) {
    box.innerHTML = "";
    var head = document.createElement("div");
    head.className = "loadgen-status";
    head.style.cssText = "font:13px sans-serif;margin:6px 4px";
    head.textContent = statusLine(st);
    box.appendChild(head);
    if (STANDALONE) box.appendChild(table(st));
    if (st.targets.length >= 2 && (st.by_c || []).length) box.appendChild(bestTable(st));
    var wrap = document.createElement("div");
    wrap.style.cssText = "display:flex;flex-wrap:wrap";
    CHARTS.forEach(function (spec) { wrap.appendChild(chart(spec, st)); });
    box.appendChild(wrap);
  }

  function box() {
    // Standalone page: a fixed div. Locust's page: right under the tab's table (re-attached if
    // React re-renders the tab panel), or at the end of the page until the table exists.
    var b = document.getElementById("loadgen-charts");
    if (STANDALONE) return b;
    if (!b) {
      b = document.createElement("div");
      b.id = "loadgen-charts";
      b.style.cssText = "padding:8px 0;background:#fafafa";
      last = null;
    }
    var table = document.querySelector("#root table");
    var anchor = table && (table.closest(".MuiTableContainer-root") || table.parentElement);
    if (anchor && b.previousElementSibling !== anchor) anchor.insertAdjacentElement("afterend", b);
    else if (!anchor && !b.parentNode) document.body.appendChild(b);
    return b;
  }

  function visible() {
    if (STANDALONE) return true;
    return new URLSearchParams(window.location.search).get("tab") === "loadgen";
  }

  function poll() {
    var b = box();
    b.style.display = visible() ? "block" : "none";
    if (!visible()) return;
    fetch(BASE + "/loadgen/status.json", { cache: "no-store" })
      .then(function (r) { return r.json(); })
      .then(function (st) { var key = JSON.stringify(st); if (key !== last) { last = key; render(b, st); } })
      .catch(function () {});
  }
  poll();
  setInterval(poll, 2000);
  window.addEventListener("popstate", poll);
})();
