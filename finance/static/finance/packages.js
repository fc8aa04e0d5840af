/* The package lifecycle page (finance): calls per package and period as lines, with the retirement
 * threshold as a dashed line, drawn from the page's own JSON (json_script "packages-chart-data", built by
 * finance.views._calls_chart: {periods, threshold (null per month), threshold_label, calls_label,
 * packages: [{package, calls}]}).
 * The container ends with data-state="ready" (browser tests). */
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("packages-chart-data").textContent);
  var el = document.getElementById("packages-chart");
  var chart = echarts.init(el);
  var series = data.packages.map(function (p) {
    return { name: p.package, type: "line", data: p.calls };
  });
  if (series.length && data.threshold !== null) {
    series[0].markLine = {
      symbol: "none", lineStyle: { type: "dashed" },
      label: { formatter: data.threshold_label, position: "insideEndTop" },
      data: [{ yAxis: data.threshold }]
    };
  }
  chart.setOption({
    animation: false,  // drawn at once: "ready" means what a screenshot shows
    tooltip: { trigger: "axis" },
    legend: { top: 0, type: "scroll" },
    grid: { top: 40, left: 60, right: 20, bottom: 30 },
    xAxis: { type: "category", data: data.periods },
    yAxis: {
      type: "value", name: data.calls_label, minInterval: 1,
      // the threshold stays in sight: a package far below it shows as far below it
      max: data.threshold === null ? null : function (range) { return Math.max(range.max, data.threshold); }
    },
    series: series
  });
  el.dataset.state = "ready";
})();
