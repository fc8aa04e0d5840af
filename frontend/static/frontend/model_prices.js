/* The model prices page: a model's input and output price per 1M tokens over its versions, as step
 * lines drawn from the page's own JSON (json_script "model-history-data", built by
 * frontend.views.catalog._chart). Times are Unix ms (UTC); prices come as exact decimal strings and
 * are only turned into numbers to be drawn. The container ends with data-state="ready" (browser tests). */
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("model-history-data").textContent);
  var text = JSON.parse(document.getElementById("model-history-text").textContent);
  var el = document.getElementById("chart-model-history");
  if (!el) return;

  function line(name, points) {
    return { name: name, type: "line", step: "end", showSymbol: true,
             data: points.map(function (p) {
               // the last point only carries the step on to today: no marker, as no version starts there
               return p[2] ? { value: [p[0], Number(p[1])], exact: p[1] }
                           : { value: [p[0], Number(p[1])], exact: p[1], symbol: "none" };
             }) };
  }

  function tooltip(items) {
    var day = new Date(items[0].value[0]).toISOString().slice(0, 10);
    return [day].concat(items.map(function (item) {
      return item.marker + echarts.format.encodeHTML(item.seriesName) + ": " + item.data.exact;
    })).join("<br>");
  }

  var chart = echarts.init(el);
  chart.setOption({
    animation: false,  // drawn at once: "ready" means what a screenshot shows
    useUTC: true,
    tooltip: { trigger: "axis", formatter: tooltip },
    legend: { top: 0 },
    grid: { left: 60, right: 30, top: 40, bottom: 40 },
    xAxis: { type: "time" },
    yAxis: { type: "value", name: text.per_million, min: 0 },
    series: [line(text.input, data.input), line(text.output, data.output)]
  });
  window.addEventListener("resize", function () { chart.resize(); });
  el.dataset.state = "ready";
})();
