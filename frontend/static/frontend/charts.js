/* Usage dashboard: each chart container names its /v1/usage/… endpoint; the figures come as JSON with
 * the session cookie. Each container ends with data-state="ready", "empty" or "error" (browser tests). */
(function () {
  "use strict";
  var text = JSON.parse(document.getElementById("chart-text").textContent);
  var form = document.getElementById("usage-filters");
  var charts = {};
  var FEW = 60;  // lines with this many points or fewer show each point (a lone point has no line)

  function query() {
    var data = new FormData(form);
    var params = new URLSearchParams();
    var start = data.get("start"), end = data.get("end");
    if (start) params.set("start", start + "T00:00:00Z");
    if (end) {
      var next = new Date(end + "T00:00:00Z");
      next.setUTCDate(next.getUTCDate() + 1);  // the end day is included
      params.set("end", next.toISOString());
    }
    ["contract", "package"].forEach(function (name) { if (data.get(name)) params.set(name, data.get(name)); });
    return { params: params, dimension: data.get("dimension"), interval: data.get("interval") };
  }

  function chart(id) {
    var el = document.getElementById(id);
    if (!charts[id]) charts[id] = echarts.init(el);
    return { el: el, chart: charts[id] };
  }

  function show(id, option, empty) {
    var c = chart(id);
    c.chart.clear();
    if (empty) {
      c.chart.setOption({ title: { text: text.no_data, left: "center", top: "middle", textStyle: { color: "#888", fontSize: 14 } } });
    } else {
      option.animation = false;  // drawn at once: "ready" means what a screenshot shows
      c.chart.setOption(option);
    }
    c.el.dataset.state = empty ? "empty" : "ready";
  }

  function forget(id) {  // a container's chart, or the charts inside it (one per subtree)
    Object.keys(charts).forEach(function (key) {
      if (key === id || key.indexOf(id + ":") === 0) { charts[key].dispose(); delete charts[key]; }
    });
  }

  function load(id, path, params, render) {
    var el = document.getElementById(id);
    el.dataset.state = "loading";
    fetch(path + "?" + params.toString(), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(function (body) { render(id, body); })
      .catch(function () {
        forget(id);
        el.dataset.state = "error";
        el.textContent = text.failed;
      });
  }

  function num(value) { return value == null ? null : Number(value); }  // null: no figure (a gap)

  function axisIndex(list) {
    return Array.isArray(list) ? list : Array.from({ length: list || 0 }, function (_, i) { return i; });
  }

  function timeseries(id, body) {
    var series = (body.series || []).map(function (s) {
      return { name: text.packages[s.package] || s.package, type: "line", showSymbol: s.points.length <= FEW,
               data: s.points.map(function (p) { return [p[0], num(p[1])]; }) };
    });
    var empty = series.every(function (s) { return s.data.length === 0; });
    show(id, { tooltip: { trigger: "axis" }, legend: { top: 0 }, grid: { left: 60, right: 20, top: 40, bottom: 40 },
               xAxis: { type: "time" }, yAxis: { type: "value", name: text.dimensions[body.dimension] || body.dimension }, series: series }, empty);
  }

  function experts(id, body) {
    var layers = axisIndex(body.layers), experts = axisIndex(body.experts);
    var cells = (body.cells || []).map(function (c) {
      return [experts.indexOf(c[1]), layers.indexOf(c[0]), Number(c[2])];
    });
    var max = cells.reduce(function (m, c) { return Math.max(m, c[2]); }, 0);
    show(id, { tooltip: { position: "top" }, grid: { left: 60, right: 90, top: 20, bottom: 40 },
               xAxis: { type: "category", data: experts, name: text.expert, splitArea: { show: true } },
               yAxis: { type: "category", data: layers, name: text.layer, splitArea: { show: true } },
               visualMap: { min: 0, max: max || 1, calculable: true, orient: "vertical", right: 0, top: "middle" },
               series: [{ name: text.tokens, type: "heatmap", data: cells }] }, cells.length === 0);
  }

  function routing(id, body) {
    var points = body.points || [];
    show(id, { tooltip: { trigger: "axis" }, legend: { top: 0 }, grid: { left: 60, right: 60, top: 40, bottom: 40 },
               xAxis: { type: "time" },
               yAxis: [{ type: "value", name: text.avg_hops }, { type: "value", name: text.cache_hit_rate, min: 0, max: 100, axisLabel: { formatter: "{value} %" } }],
               series: [
                 { name: text.avg_hops, type: "line", showSymbol: points.length <= FEW, data: points.map(function (p) { return [p[0], num(p[1])]; }) },
                 { name: text.cache_hit_rate, type: "line", yAxisIndex: 1, showSymbol: points.length <= FEW, data: points.map(function (p) { return [p[0], p[2] == null ? null : Number(p[2]) * 100]; }) }
               ] }, points.length === 0);
  }

  function latency(id, body) {
    var layers = Object.keys(body.layers || {});
    var series = ["p50_ms", "p95_ms", "p99_ms"].map(function (key) {
      return { name: key.replace("_ms", ""), type: "bar", data: layers.map(function (l) { return num(body.layers[l][key]); }) };
    });
    var sla = (body.sla || []).filter(function (s) { return s && s.layer && s.threshold_ms != null; });
    if (sla.length) {
      series.push({ name: text.sla, type: "scatter", symbol: "rect", symbolSize: [36, 3], itemStyle: { color: "#c0392b" },
                    data: sla.map(function (s) { return [s.layer, Number(s.threshold_ms)]; }) });
    }
    show(id, { tooltip: { trigger: "axis" }, legend: { top: 0 }, grid: { left: 60, right: 20, top: 40, bottom: 40 },
               xAxis: { type: "category", data: layers, axisLabel: { formatter: function (l) { return text.layers[l] || l; } } },
               yAxis: { type: "value", name: "ms" }, series: series },
         layers.every(function (l) { return body.layers[l].p50_ms == null; }));
  }

  function subtreeOption(tree) {
    var service = tree.service || [];
    var few = service.length <= FEW;
    var line = function (name, axis, index) {
      return { name: name, type: "line", yAxisIndex: axis, showSymbol: few,
               data: service.map(function (p) { return [p[0], num(p[index])]; }) };
    };
    var p99 = line(text.p99, 0, 1);
    var objective = tree.sla_p99_ms == null ? null : Number(tree.sla_p99_ms);
    // A step holds until the next one: the last desired count is drawn on to the last point shown.
    var steps = (tree.replicas || []).map(function (r) { return [r[0], Number(r[1])]; });
    var times = service.map(function (p) { return p[0]; }).concat(steps.map(function (r) { return r[0]; }))
      .concat((tree.moves || []).map(function (m) { return m[0]; })).sort();
    if (steps.length && times.length && times[times.length - 1] > steps[steps.length - 1][0]) {
      steps.push([times[times.length - 1], steps[steps.length - 1][1]]);
    }
    var ms = { type: "value", name: "ms" };
    if (objective != null) {
      // the objective stays in view even when every request was well under it
      ms.max = function (v) { return Math.ceil(Math.max(v.max, objective) * 1.1); };
      p99.markLine = { symbol: "none", lineStyle: { color: "#c0392b", type: "dashed" },
                       label: { position: "insideEndTop", formatter: text.objective + " {c}" }, data: [{ yAxis: objective }] };
    }
    var moved = function (kind, name, color) {
      return { name: name, type: "scatter", yAxisIndex: 1, symbolSize: 12, itemStyle: { color: color },
               data: (tree.moves || []).filter(function (m) { return m[1] === kind; })
                                       .map(function (m) { return [m[0], Number(m[2])]; }) };
    };
    return {
      title: { text: tree.subtree, left: 0, top: 0, textStyle: { fontSize: 13 } },
      tooltip: { trigger: "axis" }, legend: { top: 22 }, grid: { left: 60, right: 60, top: 70, bottom: 40 },
      xAxis: { type: "time" },
      yAxis: [ms, { type: "value", name: text.count, minInterval: 1 }],
      series: [
        p99, line(text.queue, 0, 3), line(text.in_flight, 1, 2),
        { name: text.replicas, type: "line", step: "end", yAxisIndex: 1, data: steps },
        moved("borrow", text.borrow, "#e67e22"), moved("return", text.return, "#16a085")
      ]
    };
  }

  function subtrees(id, body) {
    var el = document.getElementById(id);
    forget(id);
    el.textContent = "";
    var trees = body.subtrees || [];
    if (trees.length === 0) {
      el.textContent = text.no_data;
      el.dataset.state = "empty";
      return;
    }
    trees.forEach(function (tree) {
      var box = document.createElement("div");
      box.className = "chart";
      box.dataset.testid = "chart-subtree";
      box.dataset.subtree = tree.subtree;
      el.appendChild(box);
      var instance = echarts.init(box);
      var option = subtreeOption(tree);
      option.animation = false;
      instance.setOption(option);
      charts[id + ":" + tree.subtree] = instance;
    });
    el.dataset.state = "ready";
  }

  function refresh(event) {
    if (event) event.preventDefault();
    var q = query();
    var ts = new URLSearchParams(q.params);
    ts.set("dimension", q.dimension);
    ts.set("interval", q.interval);
    load("chart-timeseries", "/v1/usage/timeseries", ts, timeseries);
    load("chart-experts", "/v1/usage/experts", q.params, experts);
    var routed = new URLSearchParams(q.params);
    routed.set("interval", q.interval);
    load("chart-routing", "/v1/usage/routing", routed, routing);
    load("chart-latency", "/v1/usage/latency", q.params, latency);
    load("chart-subtrees", "/v1/usage/subtrees", q.params, subtrees);
  }

  form.addEventListener("submit", refresh);
  window.addEventListener("resize", function () { Object.keys(charts).forEach(function (k) { charts[k].resize(); }); });
  refresh();
})();
