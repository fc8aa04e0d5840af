/* The sandbox page: its calls per UTC day this month, as bars drawn from the page's own JSON
 * (json_script "sandbox-daily-data", built by frontend.views.sandbox: [ISO day, calls]). The container
 * ends with data-state="ready" (browser tests). */
(function () {
  "use strict";
  var el = document.getElementById("chart-sandbox-daily");
  if (!el) return;
  var data = JSON.parse(document.getElementById("sandbox-daily-data").textContent);
  var chart = echarts.init(el);
  chart.setOption({
    animation: false,  // drawn at once: "ready" means what a screenshot shows
    tooltip: { trigger: "axis" },
    grid: { left: 60, right: 30, top: 20, bottom: 40 },
    xAxis: { type: "category", data: data.map(function (d) { return d[0]; }) },
    yAxis: { type: "value", minInterval: 1 },
    series: [{ type: "bar", data: data.map(function (d) { return d[1]; }) }]
  });
  window.addEventListener("resize", function () { chart.resize(); });
  el.dataset.state = "ready";
})();
