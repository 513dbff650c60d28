/* loadgen: per-stage LLM figures and charts against concurrency, for Locust's web UI.
 *
 * Two uses: injected into Locust's own page (charts shown under the "LLM stages"
 * tab's table while that tab is open), and the standalone page /loadgen/.
 * Polls ./loadgen/status.json every 2 s; no external libraries (plain SVG).
 */
(function () {
  "use strict";
  var BASE = (document.currentScript && document.currentScript.dataset.base) || ".";
  var STANDALONE = !!document.getElementById("loadgen-standalone");
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];
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

  function chart(spec, stages, targets, ladder) {
    var W = 380, H = 230, L = 52, R = 12, T = 26, B = 34;
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
    var legendX = L + 170;
    targets.forEach(function (t, ti) {
      var color = COLORS[ti % COLORS.length];
      svg.appendChild(el("rect", { x: legendX + ti * 90, y: 8, width: 10, height: 3, fill: color }));
      svg.appendChild(el("text", { x: legendX + ti * 90 + 14, y: 13, "font-size": 10, "font-family": "sans-serif", fill: "#333" }, t));
      spec.series.forEach(function (sr, si) {
        var pts = stages.filter(function (s) { return s.target === t && s[sr[0]] !== null && s[sr[0]] !== undefined; })
                        .sort(function (a, b) { return a.concurrency - b.concurrency; });
        if (!pts.length) return;
        var d = pts.map(function (s, k) { return (k ? "L" : "M") + X(s.concurrency).toFixed(1) + "," + Y(s[sr[0]]).toFixed(1); }).join(" ");
        svg.appendChild(el("path", { d: d, fill: "none", stroke: color, "stroke-width": 1.8, "stroke-dasharray": si ? "4 3" : "" }));
        pts.forEach(function (s) {
          var c = el("circle", { cx: X(s.concurrency), cy: Y(s[sr[0]]), r: 3, fill: si ? "#fff" : color, stroke: color,
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
    var wrap = document.createElement("div");
    wrap.style.cssText = "display:flex;flex-wrap:wrap";
    CHARTS.forEach(function (spec) { wrap.appendChild(chart(spec, st.stages, st.targets, st.ladder)); });
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
