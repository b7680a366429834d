// The dashboard's charts, on the vendored uPlot: the ROC curve of the window with the pAUC's
// FPR range and area shaded, AUC / pAUC over time, regret and pAUC gap, throughput and queue
// lag.  Used by dashboard.js through window.AucstreamCharts.create(config).
"use strict";

(() => {
  const COLORS = { auc: "#0b5cd5", pauc: "#d9480f", regret: "#7b2cbf", gap: "#2b8a3e", rate: "#0b5cd5", lag: "#c62828" };

  function chartSize(element) {
    return { width: Math.max(300, element.clientWidth), height: 260 };
  }

  /** A uPlot chart in element ``id`` that records what it drew as data attributes; its
   * ResizeObserver goes to ``observers``. */
  function chart(id, options, data, observers) {
    const element = document.getElementById(id);
    element.replaceChildren();
    element.dataset.draws = "0";
    const plot = new uPlot(
      {
        ...chartSize(element),
        legend: { live: false },
        ...options,
        hooks: {
          ...(options.hooks || {}),
          draw: [(u) => (element.dataset.draws = String(Number(element.dataset.draws) + 1))],
        },
      },
      data,
      element
    );
    const observer = new ResizeObserver(() => plot.setSize(chartSize(element)));
    observer.observe(element);
    observers.push(observer);
    return plot;
  }

  /** The model page's four charts, empty, for a model of ``config``; ``destroy()`` removes
   * them. */
  function create(config) {
    const range = config.pauc_range;
    const observers = [];
    // (no `scale: undefined` key: uPlot would put the series on an auto-ranged scale of that name)
    const line = (label, stroke, dash, scale = "y") => ({ label, stroke, width: 2, dash, scale, spanGaps: true, points: { show: false } });
    const unit = () => ({ range: [0, 1] }); // a new object per chart: uPlot keeps state on it
    const charts = {
      roc: chart(
        "roc-chart",
        {
          scales: { x: { time: false, range: [0, 1] }, y: unit() },
          axes: [{ label: "false positive rate" }, { label: "true positive rate" }],
          series: [{ label: "FPR" }, line("ROC", COLORS.auc), line("chance", "#888", [4, 4])],
          hooks: { drawClear: [(u) => shadePartialArea(u, range)] },
        },
        [[0, 1], [null, null], [0, 1]],
        observers
      ),
      history: chart(
        "history-chart",
        {
          scales: { y: unit() },
          series: [
            {},
            line("window AUC", COLORS.auc),
            line("window pAUC", COLORS.pauc),
            line("AUC since start", COLORS.auc, [6, 4]),
            line("pAUC since start", COLORS.pauc, [6, 4]),
          ],
        },
        [[], [], [], [], []],
        observers
      ),
      regret: chart(
        "regret-chart",
        { series: [{}, line("regret per pair", COLORS.regret), line("pAUC gap", COLORS.gap)] },
        [[], [], []],
        observers
      ),
      throughput: chart(
        "throughput-chart",
        {
          scales: { rate: {}, lag: {} },
          axes: [{}, { scale: "rate", label: "events / s" }, { scale: "lag", side: 1, label: "lag (events)", grid: { show: false } }],
          series: [{}, line("events / s", COLORS.rate, null, "rate"), line("queue lag (events)", COLORS.lag, null, "lag")],
        },
        [[], [], []],
        observers
      ),
    };
    charts.destroy = () => {
      for (const observer of observers) observer.disconnect();
      for (const name of ["roc", "history", "regret", "throughput"]) charts[name].destroy();
    };
    return charts;
  }

  /** The FPR range of the pAUC, and the area under the curve inside it, under the curve. */
  function shadePartialArea(u, [low, high]) {
    const { ctx } = u;
    const { top, height } = u.bbox;
    const x = (value) => u.valToPos(value, "x", true);
    const y = (value) => u.valToPos(value, "y", true);
    ctx.save();
    ctx.fillStyle = "rgba(217, 72, 15, 0.08)";
    ctx.fillRect(x(low), top, x(high) - x(low), height);
    const [fpr, tpr] = u.data;
    if (tpr.length > 1 && tpr[0] !== null) {
      ctx.beginPath();
      ctx.moveTo(x(low), y(0));
      for (let i = 0; i + 1 < fpr.length; i++) {
        const [xa, ya, xb, yb] = [fpr[i], tpr[i], fpr[i + 1], tpr[i + 1]];
        if (xb < low || xa > high) continue;
        if (xa === xb) {
          ctx.lineTo(x(xa), y(ya));
          ctx.lineTo(x(xb), y(yb));
          continue;
        }
        const at = (value) => ya + ((yb - ya) * (value - xa)) / (xb - xa);
        const [from, to] = [Math.max(xa, low), Math.min(xb, high)];
        ctx.lineTo(x(from), y(at(from)));
        ctx.lineTo(x(to), y(at(to)));
      }
      ctx.lineTo(x(high), y(0));
      ctx.closePath();
      ctx.fillStyle = "rgba(217, 72, 15, 0.28)";
      ctx.fill();
    }
    ctx.restore();
  }

  window.AucstreamCharts = { create };
})();
