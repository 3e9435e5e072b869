// The run report's script: draws the run's JSON (the element #run-data, written by src/report) with
// uPlot and plain DOM. Text from the run directory goes in with textContent only, never as markup.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("run-data").textContent);
  var S = D.series || {};
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
    "#bcbd22"];

  // --- small helpers -------------------------------------------------------------------------------
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function svg(tag, attrs) {
    var e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }
  function num(v, digits) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    var a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
    return Number(v.toPrecision(digits || 4)).toString();
  }
  // An axis tick: ticks are round numbers, so up to 6 significant digits show them all apart (10.005).
  function tick(v) {
    var a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(1);
    return Number(v.toPrecision(6)).toString();
  }
  function when(t) {
    if (!t) return "–";
    var d = new Date(t * 1000);
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }
  function bytes(b) {
    var u = ["B", "KB", "MB", "GB", "TB"], i = 0;
    while (b >= 1000 && i < u.length - 1) b /= 1000, i++;
    return num(b, 3) + " " + u[i];
  }
  function last(name) {
    var s = S[name];
    if (!s) return null;
    for (var i = s.y.length - 1; i >= 0; i--) if (s.y[i] !== null) return { step: s.x[i], value: s.y[i] };
    return null;
  }
  function row(tbody, cells) {
    var tr = el("tr");
    cells.forEach(function (c) { tr.appendChild(c instanceof Node ? c : el("td", null, c)); });
    tbody.appendChild(tr);
    return tr;
  }
  // Series over the union of their steps (uPlot wants one x array per chart), null where one lacks a step.
  function align(list) {
    var xs = {};
    list.forEach(function (s) { s.x.forEach(function (x) { xs[x] = true; }); });
    var x = Object.keys(xs).map(Number).sort(function (a, b) { return a - b; });
    var at = {};
    x.forEach(function (v, i) { at[v] = i; });
    var out = [x];
    list.forEach(function (s) {
      var y = new Array(x.length).fill(null);
      s.x.forEach(function (v, i) { y[at[v]] = s.y[i]; });
      out.push(y);
    });
    return out;
  }

  // --- the run's story: attempts, restarts, findings, evaluations, epochs, bad steps -----------------
  var attempts = D.attempts || [];
  var lastStart = attempts.length ? attempts[attempts.length - 1].start : {};
  var lastEnd = attempts.length ? attempts[attempts.length - 1].end : null;
  var marks = [];  // {step, kind, text}: the timeline, the events table and the dashed lines
  attempts.forEach(function (a, i) {
    (a.start.skipped_checkpoints || []).forEach(function (why) {
      var r0 = a.start.resumed_from;
      marks.push({ step: r0 && typeof r0.step === "number" ? r0.step : 0, kind: "finding",
        text: "attempt " + (i + 1) + " skipped a checkpoint: " + why });
    });
    if (i === 0) return;
    var r = a.start.resumed_from;
    var step = r && typeof r.step === "number" ? r.step : 0;
    var text = "attempt " + (i + 1) + " resumed from " + (r ? (r.path ? r.path + " (step " + step + ")" : "step " + step)
      : "scratch") + (typeof a.lost === "number" ? "; " + a.lost + " step(s) lost" : "") +
      (a.start.world_size ? "; " + a.start.world_size + " ranks" : "");
    var j = a.rejoined;
    if (j && j.hosts) marks.push({ step: step, kind: "rejoin", text: (j.hosts.length > 1 ? "nodes " : "node ") +
      j.hosts.join(", ") + " rejoined, " + j.from + " \u2192 " + j.to + " ranks (attempt " + (i + 1) + ")" });
    else marks.push({ step: step, kind: "restart", text: text });
  });
  (D.findings || []).forEach(function (f) { marks.push({ step: f.step, kind: "finding", text: f.text }); });
  var evalSteps = {};
  Object.keys(S).forEach(function (n) {
    if (n.indexOf("eval/") === 0) S[n].x.forEach(function (x) { evalSteps[x] = true; });
  });
  Object.keys(evalSteps).forEach(function (x) { marks.push({ step: Number(x), kind: "eval", text: "evaluation" }); });
  if (S["train/epoch"]) {
    var e = S["train/epoch"], prev = null;
    for (var i = 0; i < e.x.length; i++) {
      if (e.y[i] === null) continue;
      var whole = Math.floor(e.y[i] + 1e-9);
      if (prev !== null && whole > prev) marks.push({ step: e.x[i], kind: "epoch", text: "epoch " + whole + " begins" });
      prev = whole;
    }
  }
  if (S["train/bad_steps"]) {
    var b = S["train/bad_steps"], before = 0;
    for (var j = 0; j < b.x.length; j++) {
      if (b.y[j] !== null && b.y[j] > before)
        marks.push({ step: b.x[j], kind: "bad", text: (b.y[j] - before) + " bad step(s) skipped (NaN/Inf), " + b.y[j] +
          " in all" });
      if (b.y[j] !== null) before = b.y[j];
    }
  }
  marks.sort(function (p, q) { return p.step - q.step; });
  var maxStep = 0;
  Object.keys(S).forEach(function (n) { var x = S[n].x; if (x.length) maxStep = Math.max(maxStep, x[x.length - 1]); });
  marks.forEach(function (m) { maxStep = Math.max(maxStep, m.step); });
  var LINE_COLORS = { epoch: "#999", restart: "#d62728", rejoin: "#2ca02c", eval: "#1f77b4" };

  // Dashed vertical lines at the epochs, restarts and evaluations on a step chart.
  function markLines(u) {
    var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
    ctx.save();
    ctx.setLineDash([4, 4]);
    ctx.lineWidth = 1;
    marks.forEach(function (m) {
      if (!LINE_COLORS[m.kind]) return;
      var x = u.valToPos(m.step, "x", true);
      if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
      ctx.strokeStyle = LINE_COLORS[m.kind];
      ctx.globalAlpha = m.kind === "eval" ? 0.35 : 0.8;
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + h);
      ctx.stroke();
    });
    ctx.restore();
  }

  function chart(target, title, list, opts) {
    opts = opts || {};
    var box = el("div", { "class": "chart", "data-chart": title });
    target.appendChild(box);
    var width = Math.max(320, Math.min(opts.wide ? 1100 : 540, target.clientWidth - 8 || 540));
    var series = [{ label: "step" }];
    list.forEach(function (s, i) {
      var o = { label: s.label, stroke: s.color || COLORS[i % COLORS.length], width: 1.5, spanGaps: true,
        points: { show: s.x.length < 60 } };
      if (s.fill) o.fill = s.fill;
      series.push(o);
    });
    var u = new uPlot({
      title: title, width: width, height: opts.height || 220, series: series, bands: opts.bands || [],
      scales: { x: { time: false }, y: opts.log ? { distr: 3 } : {} },
      legend: { show: list.length > 1 },
      axes: [{ label: "step" }, { size: 64, values: function (u, vals) { return vals.map(tick); } }],
      hooks: { draw: [markLines] }
    }, align(list), box);
    return u;
  }

  // Each panel on its own: one that fails (data no one foresaw) is named on the page, the others draw.
  function guard(name, draw) {
    try {
      draw();
    } catch (e) {
      window.reportErrors.push(name + ": " + e);
      console.error("meridian report: the " + name + " panel failed to draw: " + e);  // for headless checks
      var box = document.getElementById("page-errors");
      box.hidden = false;
      box.textContent = "Part of this page failed to draw: " + window.reportErrors.join("; ");
    }
  }

  // --- header and summary ----------------------------------------------------------------------------
  document.getElementById("run-path").textContent = D.run + " · written " + when(D.generated);
  document.title = "meridian report: " + String(D.run).split("/").filter(Boolean).pop();
  guard("summary", function () {
    var box = document.getElementById("summary");
    var status;
    if (!attempts.length || lastStart.inferred) status = S["train/loss"] ? "unknown (no attempts.jsonl)" : "no steps yet";
    else if (lastEnd) status = lastEnd.status + (lastEnd.message ? ": " + lastEnd.message : "");
    else status = "running, or ended without a record (killed?)";
    var loss = last("train/loss"), steps = lastStart.steps;
    var facts = [
      ["task", lastStart.task || "–"],
      ["status", status],
      ["steps", (loss ? loss.step : 0) + (steps ? " of " + steps : "")],
      ["loss", loss ? num(loss.value) : "–"],
      ["ranks", lastStart.world_size ? lastStart.world_size + " on " + lastStart.nodes + " node(s)" : "–"],
      ["attempts", String(attempts.length)]
    ];
    if (lastEnd && lastEnd.best) facts.push(["best " + lastEnd.best.metric, num(lastEnd.best.value) + " at step " +
      lastEnd.best.step]);
    var dl = el("dl");
    facts.forEach(function (f) { dl.appendChild(el("dt", null, f[0])); dl.appendChild(el("dd", null, f[1])); });
    box.appendChild(dl);
  });

  if ((D.problems || []).length) {
    var p = document.getElementById("problems");
    p.hidden = false;
    D.problems.forEach(function (t) { p.querySelector("ul").appendChild(el("li", null, t)); });
  }

  // --- curves --------------------------------------------------------------------------------------
  guard("curves", function () {
    var curves = document.getElementById("curves");
    function one(name, label, opts) {
      if (!S[name]) return;
      chart(curves, label, [{ label: label, x: S[name].x, y: S[name].y }], opts);
    }
    var shown = { "train/epoch": 1, "train/bad_steps": 1, "train/samples_per_s_per_rank": 1,
      "train/tokens_per_s_per_rank": 1, "train/data_s": 1, "train/forward_s": 1, "train/backward_s": 1, "train/comm_s": 1,
      "train/optimizer_s": 1, "train/step_s": 1 };
    [["train/loss", "loss"], ["train/lr", "learning rate"], ["train/grad_norm", "gradient norm"],
      ["train/samples_per_s", "samples/s"], ["train/tokens_per_s", "tokens/s"], ["train/mfu", "MFU"]].forEach(function (c) {
      one(c[0], c[1]);
      shown[c[0]] = 1;
    });
    var shares = Object.keys(S).filter(function (n) { return n.indexOf("train/share_") === 0; }).sort();
    if (shares.length) {
      chart(curves, "batch shares (train.balance)", shares.map(function (n) {
        return { label: "rank " + n.slice(12), x: S[n].x, y: S[n].y };
      }));
      shares.forEach(function (n) { shown[n] = 1; });
    }
    Object.keys(S).sort().forEach(function (n) {
      if (n.indexOf("train/") === 0 && !shown[n]) one(n, n.slice(6));
    });
    if (!curves.children.length) curves.appendChild(el("p", { "class": "empty" }, "No training steps in metrics.csv."));

    var evals = document.getElementById("evals");
    var evalNames = Object.keys(S).filter(function (n) { return n.indexOf("eval/") === 0; }).sort();
    evalNames.forEach(function (n) { chart(evals, n.slice(5), [{ label: n.slice(5), x: S[n].x, y: S[n].y }]); });
    if (!evalNames.length) evals.appendChild(el("p", { "class": "empty" }, "No evaluations (no data.eval, or none yet)."));
  });

  // --- where the time went: cumulative bands -------------------------------------------------------------
  guard("phases", function () {
    var target = document.getElementById("phases");
    var names = [["train/data_s", "data"], ["train/forward_s", "forward"], ["train/backward_s", "backward"],
      ["train/comm_s", "communication"], ["train/optimizer_s", "optimizer"]].filter(function (p) { return S[p[0]]; });
    if (!names.length) {
      target.appendChild(el("p", { "class": "empty" }, "No step times in metrics.csv."));
      return;
    }
    var aligned = align(names.map(function (p) { return S[p[0]]; }));
    var x = aligned[0], sum = new Array(x.length).fill(0), list = [];
    names.forEach(function (p, i) {
      sum = sum.map(function (v, k) { return v + (aligned[i + 1][k] || 0); });
      list.push({ label: p[1] + " (stacked)", x: x, y: sum.slice(), color: COLORS[i], fill: COLORS[i] + "55" });
    });
    // The lowest phase fills down to the axis; each band above fills between its line and the one below.
    var bands = [];
    for (var i = 1; i < list.length; i++) {
      bands.push({ series: [i + 1, i], fill: list[i].fill });  // uPlot series i+1 is list[i] (0 is x)
      delete list[i].fill;
    }
    chart(target, "seconds per step (rank 0)", list, { wide: true, height: 260, bands: bands });
  });

  // --- per-rank heatmap ----------------------------------------------------------------------------
  guard("heatmap", function () {
    var target = document.getElementById("heatmap"), H = D.heatmap;
    if (!H || !H.steps.length) {
      target.appendChild(el("p", { "class": "empty" }, "No health reports (health.jsonl) to show the ranks."));
      return;
    }
    var ranks = H.ranks.length, cols = H.steps.length, label = 150, cell = Math.max(14, Math.min(28, 320 / ranks));
    var width = Math.min(1100, Math.max(400, (target.clientWidth || 1100) - 8)), plot = width - label - 70;
    var height = ranks * cell + 40;
    var c = el("canvas", { width: width, height: height, "class": "heat", "data-chart": "ranks" });
    target.appendChild(c);
    var ctx = c.getContext("2d"), lo = Infinity, hi = -Infinity;
    H.busy_s.forEach(function (r) { r.forEach(function (v) { if (v !== null) lo = Math.min(lo, v), hi = Math.max(hi, v); }); });
    if (!isFinite(lo)) lo = 0, hi = 1;
    var span = hi - lo || 1, w = plot / cols;
    ctx.font = "12px sans-serif";
    ctx.textBaseline = "middle";
    for (var r = 0; r < ranks; r++) {
      ctx.fillStyle = "#222";
      ctx.fillText("rank " + H.ranks[r] + " · " + H.hosts[r], 4, 10 + r * cell + cell / 2, label - 8);
      for (var k = 0; k < cols; k++) {
        var v = H.busy_s[r][k];
        var t = v === null ? null : (v - lo) / span;
        ctx.fillStyle = t === null ? "#eee" : "hsl(" + (210 - 210 * t) + ",70%," + (88 - 50 * t) + "%)";
        ctx.fillRect(label + k * w, 10 + r * cell, Math.max(1, w - (w > 3 ? 1 : 0)), cell - 1);
      }
    }
    // The findings on the rank they name ("rank N"), at their step; others across every rank.
    (D.findings || []).forEach(function (f) {
      var k = 0;
      while (k < cols - 1 && H.steps[k] < f.step) k++;
      var m = /rank (\d+)/.exec(f.text), r = m ? H.ranks.indexOf(Number(m[1])) : -1;
      ctx.strokeStyle = "#000";
      ctx.lineWidth = 2;
      ctx.strokeRect(label + k * w + 1, 10 + (r < 0 ? 0 : r) * cell + 1, Math.max(2, w - 2),
        (r < 0 ? ranks : 1) * cell - 3);
    });
    ctx.fillStyle = "#222";
    ctx.textBaseline = "top";
    ctx.fillText("step " + H.steps[0], label, 14 + ranks * cell);
    var endText = "step " + H.steps[cols - 1];
    ctx.fillText(endText, label + plot - ctx.measureText(endText).width, 14 + ranks * cell);
    ctx.fillText(num(lo, 3) + " s", width - 64, 10);
    ctx.fillText(num(hi, 3) + " s", width - 64, 26);
    var legend = el("p", { "class": "note" }, "Step time from " + num(lo, 3) + " s (light) to " + num(hi, 3) +
      " s (dark) of work per step: compute and the rank's own data wait, not its wait for the others (every rank's " +
      "whole step is the slowest one's). Outlined: a health finding at that report.");
    target.appendChild(legend);
  });

  // --- timeline and events -------------------------------------------------------------------------------
  guard("timeline", function () {
    var target = document.getElementById("timeline");
    var W = 1100, H = 74, left = 20, right = 20, span = Math.max(1, maxStep);
    var s = svg("svg", { viewBox: "0 0 " + W + " " + H, width: "100%", "class": "timeline", role: "img" });
    s.appendChild(svg("line", { x1: left, y1: 40, x2: W - right, y2: 40, stroke: "#555" }));
    var rows = { epoch: 12, eval: 24, restart: 40, rejoin: 40, finding: 56, bad: 56 };
    marks.forEach(function (m) {
      var x = left + (W - left - right) * (m.step / span), y = rows[m.kind];
      var g = svg("g", { "class": "mark " + m.kind, "data-step": m.step });
      if (m.kind === "restart" || m.kind === "rejoin")
        g.appendChild(svg("path", { d: "M" + x + " 28 l7 12 l-7 12 l-7 -12 z", fill: LINE_COLORS[m.kind] }));
      else if (m.kind === "finding" || m.kind === "bad")
        g.appendChild(svg("circle", { cx: x, cy: y, r: 5, fill: m.kind === "bad" ? "#9467bd" : "#ff7f0e" }));
      else g.appendChild(svg("line", { x1: x, y1: y - 6, x2: x, y2: y + 6, stroke: LINE_COLORS[m.kind] }));
      var title = svg("title", {});
      title.textContent = "step " + m.step + ": " + m.text;
      g.appendChild(title);
      s.appendChild(g);
    });
    var t0 = svg("text", { x: left, y: 72, "font-size": 11 }), t1 = svg("text", { x: W - right, y: 72, "font-size": 11,
      "text-anchor": "end" });
    t0.textContent = "step 0";
    t1.textContent = "step " + span;
    s.appendChild(t0);
    s.appendChild(t1);
    target.appendChild(s);
    var names = { epoch: "epoch", eval: "evaluation", restart: "restart", rejoin: "grow-back", finding: "health finding",
      bad: "bad step" };
    var tbody = document.querySelector("#events tbody");
    marks.filter(function (m) { return m.kind !== "eval" && m.kind !== "epoch"; }).forEach(function (m) {
      row(tbody, [String(m.step), names[m.kind], m.text]).className = "ev-" + m.kind;
    });
    if (!tbody.children.length) row(tbody, ["–", "nothing", "no restarts, health findings or bad steps"]);
  });

  // --- attempts -----------------------------------------------------------------------------------
  guard("attemptsTable", function () {
    var tbody = document.querySelector("#attempts tbody");
    attempts.forEach(function (a, i) {
      var s = a.start, r = s.resumed_from, e = a.end;
      var from = r ? (r.path ? r.path + " (step " + r.step + ")" : "step " + r.step) : (s.inferred && i > 0 ? "?" :
        "the start");
      if ((s.skipped_checkpoints || []).length) from += "; skipped as corrupt or unreadable: " +
        s.skipped_checkpoints.join("; ");
      var ended = e ? e.status + " at step " + e.step + (e.message ? ": " + e.message : "") + " (" + when(e.time) + ")"
        : (a.last_step !== null && a.last_step !== undefined ? "no record after step " + a.last_step +
          (i === attempts.length - 1 ? " (still running, or killed)" : " (killed or crashed)") : "no record");
      var size = s.world_size ? s.world_size + " (" + s.nodes + " node(s))" : "?";
      if (a.rejoined && a.rejoined.hosts) size += "; " + a.rejoined.hosts.join(", ") + " rejoined";
      row(tbody, [String(i + 1), when(s.time), size, from,
        i === 0 ? "–" : (typeof a.lost === "number" ? String(a.lost) : "?"), ended]);
    });
    if (!attempts.length) row(tbody, ["–", "no attempts recorded", "", "", "", ""]);
    if ((D.errors || []).length) {
      var box = document.getElementById("errors");
      box.appendChild(el("h3", null, "Error lines in the rank logs"));
      var pre = el("pre", { "class": "log" });
      pre.textContent = D.errors.join("\n");
      box.appendChild(pre);
    }
  });

  // --- facts, checkpoints, config -------------------------------------------------------------------------
  guard("facts", function () {
    var tbody = document.querySelector("#facts tbody"), s = lastStart;
    function fact(k, v) { if (v !== undefined && v !== null && v !== "") row(tbody, [el("th", null, k), String(v)]); }
    fact("run directory", D.run);
    fact("task", s.task);
    fact("data", s.data);
    fact("global batch", s.global_batch);
    fact("parameters", s.parameters ? num(s.parameters / 1e6, 4) + " M" : null);
    fact("precision", s.precision);
    if (s.hosts) {
      var count = Object.create(null);
      s.hosts.forEach(function (h, r) { (count[h] = count[h] || []).push(r); });
      fact("nodes", Object.keys(count).map(function (h) { return h + " (ranks " + count[h].join(", ") + ")"; }).join("; "));
    }
    if (s.devices) {
      var kinds = Object.create(null);
      s.devices.forEach(function (d) { kinds[d] = (kinds[d] || 0) + 1; });
      fact("devices", Object.keys(kinds).map(function (d) { return kinds[d] + " × " + d; }).join(", "));
    }
    if (s.versions) Object.keys(s.versions).forEach(function (k) { fact(k, s.versions[k]); });
    Object.keys(S).filter(function (n) { return n.indexOf("eval/") === 0; }).sort().forEach(function (n) {
      var l = last(n);
      if (l) fact("last " + n, num(l.value) + " (step " + l.step + ")");
    });
    if (lastEnd && lastEnd.best) fact("best " + lastEnd.best.metric, num(lastEnd.best.value) + " at step " +
      lastEnd.best.step + " (checkpoints/best.h5)");
    var cb = document.querySelector("#checkpoints tbody");
    (D.checkpoints || []).forEach(function (c) {
      row(cb, [c.name + (c.latest ? " (latest)" : ""), c.step === undefined ? "–" : String(c.step), bytes(c.bytes),
        when(c.time)]);
    });
    if (!(D.checkpoints || []).length) row(cb, ["none", "", "", ""]);
    document.getElementById("config").textContent = D.config === null ? "(config.yaml is missing)" : D.config;
  });
  document.documentElement.setAttribute("data-drawn", "yes");
})();
