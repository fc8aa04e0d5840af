/* The scheduler page (finance): one chart per subtree, drawn from the page's own JSON (json_script
 * "scheduler-chart-data", built by finance.scheduler.chart): the desired replicas of each scaling step as
 * a step line, each borrow and return as a marker at the executors it moved; below it, per bucket of the
 * subtree's records, the P99 latency against the objective its router sent, the requests in flight and
 * the wait in line. Times are Unix ms (UTC).
 * Each container ends with data-state="ready" (browser tests). */
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("scheduler-chart-data").textContent);
  var text = JSON.parse(document.getElementById("scheduler-chart-text").textContent);
  var encode = echarts.format.encodeHTML;

  function when(ms) { return new Date(ms).toISOString().slice(0, 19).replace("T", " ") + " UTC"; }

  function moves(points, name, symbol, color) {
    return {
      name: name, type: "scatter", yAxisIndex: 1, symbol: symbol, symbolSize: 12, itemStyle: { color: color },
      data: points.map(function (p) { return { value: [p[0], p[1]], lender: p[2], executors: p[3] }; })
    };
  }

  function tooltip(item) {
    var lines = [encode(item.seriesName), when(item.value[0])];
    if (item.seriesIndex === 0) {
      lines.push(encode(text.desired) + ": " + item.value[1]);
    } else {
      lines.push(encode(text.executors) + ": " + item.value[1] + (item.data.executors ? " (" + encode(item.data.executors) + ")" : ""));
      if (item.data.lender) lines.push(encode(text.lender) + ": " + encode(item.data.lender));
    }
    return lines.join("<br>");
  }

  data.subtrees.forEach(function (subtree, index) {
    var el = document.getElementById("scheduler-chart-" + index);
    if (!el) return;
    var chart = echarts.init(el);
    chart.setOption({
      animation: false,  // drawn at once: "ready" means what a screenshot shows
      tooltip: { trigger: "item", formatter: tooltip },
      legend: { top: 0 },
      grid: { left: 60, right: 60, top: 40, bottom: 40 },
      xAxis: { type: "time" },
      yAxis: [
        { type: "value", name: text.desired, minInterval: 1 },
        { type: "value", name: text.executors, minInterval: 1, position: "right", splitLine: { show: false } }
      ],
      series: [
        { name: text.desired, type: "line", step: "end", yAxisIndex: 0, showSymbol: true,
          data: subtree.desired.map(function (p) { return [p[0], p[1]]; }) },
        moves(subtree.borrow, text.borrow, "triangle", "#c0392b"),
        moves(subtree["return"], text["return"], "diamond", "#27ae60")
      ]
    });
    window.addEventListener("resize", function () { chart.resize(); });
    el.dataset.state = "ready";
    service(subtree, document.getElementById("scheduler-service-" + index));
  });

  function service(subtree, el) {
    if (!el) return;
    var chart = echarts.init(el);
    function column(i) { return subtree.service.map(function (p) { return [p[0], p[i]]; }); }
    var p99 = { name: text.p99, type: "line", yAxisIndex: 0, showSymbol: false, data: column(1) };
    if (subtree.sla_p99_ms !== null) {
      p99.markLine = { symbol: "none", lineStyle: { color: "#c0392b", type: "dashed" },
        label: { formatter: encode(text.sla) + " " + subtree.sla_p99_ms + " ms" },
        data: [{ yAxis: subtree.sla_p99_ms }] };
    }
    chart.setOption({
      animation: false,
      tooltip: { trigger: "axis" },
      legend: { top: 0 },
      grid: { left: 60, right: 60, top: 40, bottom: 40 },
      xAxis: { type: "time" },
      yAxis: [
        { type: "value", name: "ms" },
        { type: "value", name: text.in_flight, position: "right", splitLine: { show: false } }
      ],
      series: [
        p99,
        { name: text.queue, type: "line", yAxisIndex: 0, showSymbol: false, data: column(3) },
        { name: text.in_flight, type: "bar", yAxisIndex: 1, data: column(2), itemStyle: { opacity: 0.4 } }
      ]
    });
    window.addEventListener("resize", function () { chart.resize(); });
    el.dataset.state = "ready";
  }
})();
