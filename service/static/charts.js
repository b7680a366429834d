// The dashboard's charts, on the vendored uPlot: the ROC curve of the window with the pAUC's
// FPR range and area shaded and the operating points at the model's target FPRs marked
// (``setOperatingPoints``, recorded in data-operating-points), AUC / pAUC over time, regret and pAUC gap, throughput and queue
// lag.  Used by dashboard.js through window.AucstreamCharts.create(config).
//
// The three time charts mark each detected drift (``setDrifts``) with a dashed vertical line
// labelled "drift", and widen their time axis to show drifts older than their first point (a
// page opened after the drift).  Each records what it marked, for tests and scripts, as JSON in
// data-drifts ([{event, time, x}], x in canvas pixels) and its time axis in data-x-range
// ([min, max] unix s) and data-plot ([left, width] of the plotting area, canvas pixels).  The
// regret and throughput charts size their y-axes to their longest tick label and record each in
// data-axes ({scale: {labels, size, room, longest}}, CSS pixels).
"use strict";

(() => {
  const COLORS = { operating: "#087f5b", auc: "#0b5cd5", pauc: "#d9480f", regret: "#7b2cbf", gap: "#2b8a3e", rate: "#0b5cd5", lag: "#c62828", drift: "#d6336c" };

  // [CHOICE] the time axis of a single point (an idle model's only message): ten minutes
  const LONE_POINT_SPAN = 600;
  // CSS pixels beside a y-axis' longest tick label
  const AXIS_LABEL_MARGIN = 4;

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
          draw: [
            ...((options.hooks || {}).draw || []),
            (u) => (element.dataset.draws = String(Number(element.dataset.draws) + 1)),
          ],
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
    // a few points (an idle model's first messages) are drawn as dots too: a line needs two,
    // and two a second apart make a line too short to see; so are the values of a series that
    // has a few among many nulls (the regret and pAUC gap of a model opened after it went
    // quiet: the server's history has none, its one message has them)
    const line = (label, stroke, dash, scale = "y") => ({ label, stroke, width: 2, dash, scale, spanGaps: true,
                                                         points: { show: (u) => u.data[0].length <= 3,
                                                                   filter: (u, series, shown) => (shown ? null : fewValues(u.data[series])) } });
    const unit = () => ({ range: [0, 1] }); // a new object per chart: uPlot keeps state on it
    const drifts = { marks: [] }; // [{event, time}] to mark, shared by the time charts
    const operating = { points: [] }; // [{target, fpr, tpr}] to mark on the ROC curve
    // a new object per chart, as above; the draw hook goes into each time chart's hooks
    const time = () => ({ range: (u, min, max) => timeRange(u, min, max, drifts.marks) });
    const driftHooks = (id) => ({ draw: [(u) => drawDrifts(u, drifts.marks, document.getElementById(id))] });
    const charts = {
      roc: chart(
        "roc-chart",
        {
          scales: { x: { time: false, range: [0, 1] }, y: unit() },
          axes: [{ label: "false positive rate" }, { label: "true positive rate" }],
          series: [{ label: "FPR" }, line("ROC", COLORS.auc), line("chance", "#888", [4, 4])],
          hooks: {
            drawClear: [(u) => shadePartialArea(u, range)],
            draw: [(u) => drawOperatingPoints(u, operating.points, document.getElementById("roc-chart"))],
          },
        },
        [[0, 1], [null, null], [0, 1]],
        observers
      ),
      history: chart(
        "history-chart",
        {
          scales: { x: time(), y: unit() },
          hooks: driftHooks("history-chart"),
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
        {
          scales: { x: time() },
          hooks: driftHooks("regret-chart"),
          axes: [{}, fittedAxis("regret-chart", { scale: "y" })],
          series: [{}, line("regret per pair", COLORS.regret), line("pAUC gap", COLORS.gap)],
        },
        [[], [], []],
        observers
      ),
      throughput: chart(
        "throughput-chart",
        {
          scales: { x: time(), rate: {}, lag: {} },
          hooks: driftHooks("throughput-chart"),
          axes: [{}, fittedAxis("throughput-chart", { scale: "rate", label: "events / s" }),
                 fittedAxis("throughput-chart", { scale: "lag", side: 1, label: "lag (events)", grid: { show: false } })],
          series: [{}, line("events / s", COLORS.rate, null, "rate"), line("queue lag (events)", COLORS.lag, null, "lag")],
        },
        [[], [], []],
        observers
      ),
    };
    /** The drifts to mark ([{event, time}], time in unix s as the charts' x values), drawn
     * with the charts' next setData. */
    charts.setDrifts = (list) => {
      drifts.marks = list;
    };
    /** The operating points at the model's target FPRs ([{target, fpr, tpr}]), marked on the
     * ROC curve with its next setData. */
    charts.setOperatingPoints = (list) => {
      operating.points = list;
    };
    charts.destroy = () => {
      for (const observer of observers) observer.disconnect();
      for (const name of ["roc", "history", "regret", "throughput"]) charts[name].destroy();
    };
    return charts;
  }

  /** The indices of ``values``' non-null entries when there are a few (at most three), else
   * null: where a series too sparse for a line gets dots. */
  function fewValues(values) {
    const found = [];
    for (let i = 0; i < values.length; i++) {
      if (values[i] === null || values[i] === undefined) continue;
      if (found.length === 3) return null;
      found.push(i);
    }
    return found.length ? found : null;
  }

  /** A y-axis of ``options`` as wide as its longest tick label: uPlot's fixed width (50 px)
   * cut the minus sign off labels such as "-0.075", while "-0.05" fitted.  What it drew goes to
   * chart ``id``'s data-axes, by scale: {labels, size, room, longest} (CSS pixels; ``room``:
   * the width left for the labels beside the ticks). */
  function fittedAxis(id, options) {
    return {
      ...options,
      size: (u, values, axisIndex, cycle) => {
        const axis = u.axes[axisIndex];
        if (cycle > 1) return axis._size; // uPlot settles the layout over a few cycles
        const labels = values || [];
        u.ctx.font = axis.font[0];
        const widths = labels.map((label) => u.ctx.measureText(label).width / uPlot.pxRatio);
        const longest = Math.max(0, ...widths);
        const room = Math.ceil(longest) + AXIS_LABEL_MARGIN;
        const size = axis.ticks.size + axis.gap + room; // a title has its own room (labelSize)
        const element = document.getElementById(id);
        const drawn = JSON.parse(element.dataset.axes || "{}");
        drawn[options.scale] = { labels, size, room, longest };
        element.dataset.axes = JSON.stringify(drawn);
        return size;
      },
    };
  }

  /** A time chart's x range: its data's (a single time: the ``LONE_POINT_SPAN`` up to it, where
   * uPlot would stretch its range over years), widened to the drifts it marks, with a margin so
   * that the earliest is not on the edge. */
  function timeRange(u, min, max, marks) {
    const times = u.data[0];
    if (times.length && times[times.length - 1] === times[0]) {
      const last = times[times.length - 1];
      [min, max] = [last - LONE_POINT_SPAN, last + 0.05 * LONE_POINT_SPAN];
    }
    if (min === null || max === null || !marks.length || !times.length) return [min, max];
    const low = Math.min(times[0], ...marks.map((mark) => mark.time));
    const high = Math.max(times[times.length - 1], ...marks.map((mark) => mark.time));
    if (low >= times[0]) return [min, max]; // every mark among the points: uPlot's range
    return [low - 0.05 * (high - low), high];
  }

  /** A dashed vertical line and a "drift" label at each mark, over the series; what was drawn
   * goes to ``element``'s data attributes (see the top of this file). */
  function drawDrifts(u, marks, element) {
    const { ctx } = u;
    const { left, top, width, height } = u.bbox;
    const scale = u.scales.x;
    const drawn = [];
    ctx.save();
    ctx.strokeStyle = COLORS.drift;
    ctx.fillStyle = COLORS.drift;
    ctx.lineWidth = Math.max(1, Math.round(2 * uPlot.pxRatio));
    ctx.setLineDash([6 * uPlot.pxRatio, 4 * uPlot.pxRatio]);
    ctx.font = `${Math.round(11 * uPlot.pxRatio)}px system-ui, sans-serif`;
    ctx.textBaseline = "top";
    for (const mark of marks) {
      // whole pixels: a crisp line, and the x the test reads from the canvas
      const x = Math.round(u.valToPos(mark.time, "x", true));
      if (!(x >= left && x <= left + width)) continue; // outside the axis (or no axis yet)
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      const label = "drift";
      const room = left + width - x - 4 * uPlot.pxRatio;
      const textWidth = ctx.measureText(label).width;
      ctx.textAlign = room > textWidth ? "left" : "right"; // inside the plot
      ctx.fillText(label, x + (room > textWidth ? 3 : -3) * uPlot.pxRatio, top + 2 * uPlot.pxRatio);
      drawn.push({ event: mark.event, time: mark.time, x });
    }
    ctx.restore();
    element.dataset.drifts = JSON.stringify(drawn);
    element.dataset.xRange = JSON.stringify([scale.min, scale.max]);
    element.dataset.plot = JSON.stringify([left, width]);
  }

  /** A dot on the ROC curve at each operating point, labelled with its target FPR; what was
   * drawn goes to ``element``'s data-operating-points ([{target, fpr, tpr, x, y}], x and y in
   * canvas pixels). */
  function drawOperatingPoints(u, points, element) {
    const { ctx } = u;
    const drawn = [];
    const radius = 5 * uPlot.pxRatio;
    ctx.save();
    ctx.font = `${Math.round(11 * uPlot.pxRatio)}px system-ui, sans-serif`;
    ctx.textBaseline = "middle";
    for (const point of points) {
      const x = Math.round(u.valToPos(point.fpr, "x", true));
      const y = Math.round(u.valToPos(point.tpr, "y", true));
      if (!Number.isFinite(x) || !Number.isFinite(y)) continue;
      ctx.beginPath();
      ctx.arc(x, y, radius, 0, 2 * Math.PI);
      ctx.fillStyle = COLORS.operating;
      ctx.fill();
      ctx.lineWidth = 1.5 * uPlot.pxRatio;
      ctx.strokeStyle = "#ffffff";
      ctx.stroke();
      ctx.fillStyle = COLORS.operating;
      ctx.textAlign = "left";
      ctx.fillText(`FPR ≤ ${percent(point.target)}`, x + radius + 3 * uPlot.pxRatio, y + 2 * radius);
      drawn.push({ target: point.target, fpr: point.fpr, tpr: point.tpr, x, y });
    }
    ctx.restore();
    element.dataset.operatingPoints = JSON.stringify(drawn);
  }

  /** 0.001 -> "0.1 %" (at most three decimals, no trailing zeros). */
  function percent(value) {
    return `${+(100 * value).toFixed(3)} %`;
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

  window.AucstreamCharts = { create, percent };
})();
