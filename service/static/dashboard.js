// aucstream live dashboard: plain JavaScript on the vendored uPlot (through charts.js), no
// build step.
//
// Data: GET /dashboard/config (public: whether an API key is needed), GET /v1/models,
// GET /v1/models/{id}, the server-sent metrics stream /v1/models/{id}/metrics/stream (read with
// fetch() so that the API key travels in the X-API-Key header, never in a URL) and the ROC
// curve /v1/models/{id}/metrics/roc, read again each time the model's version changes.
// The time charts start from the history the server keeps (GET .../metrics/history: a point
// per hour for the last month, then a point per minute for the last day) and go on live from
// the stream; the drifts marked on them come from each message (drift.recent: the service
// keeps the last ones, so a page opened after a drift marks it too).  An idle model's chart
// spans its history and says since when no event arrived (#history-note).
//
// For tests and scripts the page reports what it did as data attributes: body[data-state]
// ("loading", "need-key", "no-models", "live", "reconnecting", "error") and, on each chart's
// container, data-points (points drawn), data-version (model version drawn) and data-draws;
// the time charts also data-drifts, data-x-range and data-plot (drift marks: charts.js), and
// the AUC chart data-server-points (points read from the server's history).  While the server
// compiles its kernels, the #warmup banner shows, with data-done, data-total and
// data-seconds-left from /readyz.
"use strict";

(() => {
  const KEY_STORAGE = "aucstream.apiKey";
  const HISTORY_LIMIT = 7200; // points per model: two hours at one message a second
  const MODEL_LIST_SECONDS = 10;
  const MAX_RECONNECT_MS = 15000;
  // [CHOICE] drifts up to an hour older than the history's first point are marked (the time
  // axis widens to them); older ones would squash the history into the right edge, and the
  // "drifts detected" tile still reports the last one
  const DRIFT_LOOKBACK_SECONDS = 3600;
  // [CHOICE] a model that learned nothing for this long is called idle under its chart
  const IDLE_SECONDS = 120;

  const $ = (id) => document.getElementById(id);
  const state = {
    config: null,
    models: [],
    current: null, // { id, info, stream: AbortController, history: [], rocVersion, rocBusy }
    charts: null, // AucstreamCharts.create(): { roc, history, regret, throughput, destroy }
  };

  // ------------------------------------------------------------------ the API
  class ApiError extends Error {
    constructor(status, problem, retryAfter) {
      super(problem.detail || problem.title || `HTTP ${status}`);
      this.status = status;
      this.problem = problem;
      this.retryAfter = Number(retryAfter) || null;
    }
  }

  const apiKey = () => sessionStorage.getItem(KEY_STORAGE);

  async function api(path, options = {}) {
    const headers = { Accept: "application/json", ...(options.headers || {}) };
    const key = apiKey();
    if (key) headers["X-API-Key"] = key;
    const response = await fetch(path, { ...options, headers, cache: "no-store" });
    if (!response.ok) {
      let problem = {};
      try {
        problem = await response.json();
      } catch (_) {
        problem = { title: response.statusText };
      }
      throw new ApiError(response.status, problem, response.headers.get("Retry-After"));
    }
    return response;
  }

  const modelPath = (id) => `/v1/models/${encodeURIComponent(id)}`;
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  // ------------------------------------------------------------------ page state
  function setState(value, text) {
    document.body.dataset.state = value;
    const status = $("status");
    status.dataset.status = value;
    status.textContent = text || value.replace("-", " ");
  }

  /** A message above the charts; a sticky one (a deleted model) stays until the user picks
   * a model, others go with the next metrics message. */
  function notice(message, sticky = false) {
    const element = $("notice");
    if (!message && element.dataset.sticky === "true") return;
    element.textContent = message || "";
    element.hidden = !message;
    element.dataset.sticky = String(sticky);
  }

  /** What to do about a failed request: true if it is worth retrying. */
  function handleError(error) {
    if (error.name === "AbortError") return false;
    if (error instanceof ApiError && error.status === 401) {
      clearInterval(modelTimer); // no more requests until there is a key
      state.current?.stream.abort();
      askForKey(apiKey() ? `The server refused this key: ${error.message}` : null);
      return false;
    }
    if (error instanceof ApiError && error.status === 404 && state.current) {
      notice(`Model ${state.current.id} does not exist (any more).`, true);
      state.current.stream.abort();
      state.current = null;
      setState("error");
      refreshModels();
      return false;
    }
    const warming = error instanceof ApiError && error.problem.type?.endsWith("/warming-up");
    if (warming) watchWarmup(); // a restarted server: show its progress
    notice(warming ? "The server is still compiling its kernels; retrying." : error.message);
    setState(warming ? "loading" : "reconnecting", warming ? "warming up" : "reconnecting");
    return true;
  }

  // ------------------------------------------------------------------ API key
  function askForKey(message) {
    setState("need-key", "API key needed");
    if (message) $("key-message").textContent = message;
    const dialog = $("key-dialog");
    if (!dialog.open) dialog.showModal();
    $("api-key").focus();
  }

  function setupKeyDialog() {
    $("key-form").addEventListener("submit", (event) => {
      event.preventDefault(); // no navigation: the key never goes into a URL
      const key = $("api-key").value.trim();
      if (!key) return;
      sessionStorage.setItem(KEY_STORAGE, key);
      $("api-key").value = "";
      $("key-dialog").close();
      $("forget-key").hidden = false;
      start();
    });
    $("key-dialog").addEventListener("cancel", (event) => event.preventDefault());
    $("forget-key").addEventListener("click", () => {
      sessionStorage.removeItem(KEY_STORAGE);
      location.reload();
    });
  }

  // ------------------------------------------------------------------ model list
  async function refreshModels() {
    try {
      const { models } = await (await api("/v1/models")).json();
      state.models = models;
      renderModelList();
      if (!models.length) {
        setState("no-models", "no models");
        $("model").hidden = true;
        return;
      }
      const wanted = modelInHash();
      const target = models.includes(wanted) ? wanted : models[0];
      if (!state.current || state.current.id !== target) select(target);
    } catch (error) {
      handleError(error);
    }
  }

  function renderModelList() {
    const list = $("model-list");
    list.replaceChildren(
      ...state.models.map((id) => {
        const link = document.createElement("a");
        link.href = `#/models/${encodeURIComponent(id)}`;
        link.textContent = id;
        link.setAttribute("aria-current", String(state.current?.id === id));
        const item = document.createElement("li");
        item.append(link);
        return item;
      })
    );
    $("models-empty").hidden = state.models.length > 0;
  }

  /** The model named by the address's ``#/models/<id>``, or null. */
  function modelInHash() {
    const match = /^#\/?models\/(.+)$/.exec(location.hash);
    try {
      return match ? decodeURIComponent(match[1]) : null;
    } catch (_) {
      return null; // a malformed escape: no model
    }
  }

  // ------------------------------------------------------------------ one model
  async function select(id) {
    state.current?.stream.abort();
    const current = { id, info: null, stream: new AbortController(), history: [], rocVersion: null,
                      lastLearnedAt: null, eventsLearned: null };
    state.current = current;
    renderModelList();
    $("model").hidden = false;
    $("model-title").textContent = id;
    $("model-meta").textContent = "";
    state.charts?.destroy();
    state.charts = null;
    try {
      current.info = await (await api(modelPath(id))).json();
    } catch (error) {
      if (handleError(error)) setTimeout(() => state.current === current && select(id), 2000);
      return;
    }
    if (state.current !== current) return;
    const { config } = current.info;
    const learner = config.learner === "auto" ? "auto (candidates side by side)" : config.learner;
    $("model-meta").textContent =
      `learner ${learner} · ${config.n_features} features (${config.feature_mode}, ` +
      `${config.scaling} scaling) · pAUC over FPR ${config.pauc_range[0]}–${config.pauc_range[1]}` +
      ` · window ${config.window.toLocaleString()} events`;
    state.charts = AucstreamCharts.create(config);
    $("history-note").textContent = "";
    $("history-chart").dataset.serverPoints = "0";
    await loadHistory(current);
    if (state.current !== current) return;
    follow(current);
    if (state.config.mode === "queue") pollQueue(current);
  }

  /** The history the server kept, oldest first: its hourly points older than the first minute
   * point, then the minute points.  Drawn before the stream's first message; the stream's
   * points follow it.  A failure leaves the charts to the stream alone. */
  async function loadHistory(current) {
    const path = `${modelPath(current.id)}/metrics/history`;
    try {
      const [minutes, hours] = await Promise.all(
        ["minute", "hour"].map(async (resolution) =>
          (await api(`${path}?resolution=${resolution}`, { signal: current.stream.signal })).json()
        )
      );
      if (state.current !== current) return;
      const firstMinute = minutes.points.length ? minutes.points[0].time : Infinity;
      const points = [...hours.points.filter((point) => point.time < firstMinute), ...minutes.points];
      current.history.push(...points.map((point, i) => storedPoint(point, points[i - 1], minutes.version)));
      current.lastLearnedAt = minutes.last_learned_at;
      $("history-chart").dataset.serverPoints = String(points.length);
      if (points.length) drawHistory(current);
    } catch (error) {
      if (error.name !== "AbortError" && error instanceof ApiError && error.status === 401) handleError(error);
    }
  }

  /** A chart point from one of the server's history points (``previous``: the one before it,
   * for the mean rate between them); what the server does not keep is null. */
  function storedPoint(point, previous, version) {
    const rate = previous && point.time > previous.time
      ? (point.events_learned - previous.events_learned) / (point.time - previous.time)
      : null;
    return {
      time: point.time,
      version,
      stored: true,
      windowAuc: point.auc,
      windowPauc: point.pauc,
      sinceStartAuc: null,
      sinceStartPauc: null,
      regret: null,
      paucGap: null,
      eventsPerSecond: rate,
      lagEvents: null,
    };
  }

  /** Queue mode: the lag grows while the model's version stands still (no worker, or a slow
   * one), when the stream has nothing to say, and only GET .../metrics reports it: read it
   * every stream interval (at least a second). */
  async function pollQueue(current) {
    const period = Math.max(1, state.config.stream_interval_seconds) * 1000;
    while (!current.stream.signal.aborted) {
      try {
        const response = await api(`${modelPath(current.id)}/metrics`, { signal: current.stream.signal });
        onMetrics(current, await response.json(), true);
      } catch (error) {
        if (current.stream.signal.aborted || !handleError(error)) return;
      }
      await sleep(period);
    }
  }

  /** Read the metrics stream until the model changes, reconnecting with back-off. */
  async function follow(current) {
    let delay = 1000;
    while (!current.stream.signal.aborted) {
      try {
        await readStream(current);
        delay = 1000;
      } catch (error) {
        if (current.stream.signal.aborted || !handleError(error)) return;
      }
      if (current.stream.signal.aborted) return;
      setState("reconnecting");
      await sleep(delay);
      delay = Math.min(2 * delay, MAX_RECONNECT_MS);
    }
  }

  async function readStream(current) {
    const response = await api(`${modelPath(current.id)}/metrics/stream`, {
      signal: current.stream.signal,
      headers: { Accept: "text/event-stream" },
    });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const message = parseEvent(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (message?.event === "metrics") onMetrics(current, JSON.parse(message.data));
      }
    }
  }

  /** One server-sent event block, parsed as the HTML standard says (its "server-sent events"). */
  function parseEvent(block) {
    let event = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (!line || line.startsWith(":")) continue; // a comment: the keep-alive
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") event = value;
      else if (field === "data") data.push(value);
    }
    return data.length ? { event, data: data.join("\n") } : null;
  }

  /** A metrics message: from the stream, or (``polled``) from GET .../metrics in queue mode. */
  function onMetrics(current, metrics, polled = false) {
    if (state.current !== current) return;
    const history = current.history;
    const last = history[history.length - 1];
    if (last && metrics.version < last.version) {
      if (polled) return; // read before the stream's latest message: stale
      history.length = 0; // the stream says the model was reset: a new history
      current.lastLearnedAt = null;
    }
    const learned = metrics.counts.events_learned;
    if (current.eventsLearned !== null && learned > current.eventsLearned) current.lastLearnedAt = Date.now() / 1000;
    current.eventsLearned = learned;
    if (metrics.queue) current.queue = metrics.queue;
    else if (current.queue) metrics = { ...metrics, queue: current.queue }; // the stream has none
    notice(null);
    setState("live");
    history.push(historyPoint(metrics));
    if (history.length > HISTORY_LIMIT) history.splice(0, history.length - HISTORY_LIMIT);
    current.drifts = metrics.drift?.recent ?? [];
    renderTiles(metrics);
    renderCounts(metrics);
    renderLeaderboard(metrics.leaderboard);
    drawHistory(current);
    if (metrics.version !== current.rocVersion) refreshRoc(current);
  }

  function historyPoint(metrics) {
    const regret = metrics.regret;
    return {
      time: Date.now() / 1000,
      version: metrics.version,
      windowAuc: metrics.window.auc,
      windowPauc: metrics.window.pauc,
      sinceStartAuc: metrics.since_start.auc,
      sinceStartPauc: metrics.since_start.pauc,
      regret: regret ? regret.regret : null,
      paucGap: regret ? regret.pauc_gap : null,
      eventsPerSecond: metrics.throughput.events_per_second_recent,
      lagEvents: metrics.queue ? metrics.queue.events : null,
    };
  }

  /** The ROC curve of the window, once per model version (one request in flight at most). */
  async function refreshRoc(current) {
    if (current.rocBusy) return;
    current.rocBusy = true;
    try {
      const roc = await (await api(`${modelPath(current.id)}/metrics/roc`)).json();
      if (state.current !== current) return;
      current.rocVersion = roc.version;
      drawRoc(roc);
    } catch (error) {
      if (error.name !== "AbortError") handleError(error);
    } finally {
      current.rocBusy = false;
    }
    const latest = current.history[current.history.length - 1];
    if (state.current === current && latest && latest.version !== current.rocVersion) {
      refreshRoc(current); // a newer version arrived while this one was read
    }
  }

  // ------------------------------------------------------------------ numbers
  const format = (value, digits = 4) =>
    value === null || value === undefined || !Number.isFinite(value) ? "–" : value.toFixed(digits);
  const count = (value) => (value === null || value === undefined ? "–" : value.toLocaleString());

  function tile(label, value, detail) {
    const element = document.createElement("div");
    element.className = "tile";
    for (const [name, text] of [["label", label], ["value", value], ["detail", detail || ""]]) {
      const part = document.createElement("div");
      part.className = name;
      part.textContent = text;
      element.append(part);
    }
    return element;
  }

  function renderTiles(metrics) {
    const { window: win, since_start: start, regret, throughput, queue, counts } = metrics;
    const range = `FPR ${metrics.pauc_range[0]}–${metrics.pauc_range[1]}`;
    const why = (part) => (part.reason ? part.reason : `${count(part.events)} events`);
    const tiles = [
      tile("window AUC", format(win.auc), why(win)),
      tile("window pAUC", format(win.pauc), `${range} · McClish ${format(win.pauc_standardized, 3)}`),
      tile("AUC since start", format(start.auc), start.cumulative_exact ? "exact" : `estimated: ${count(start.reservoir_capacity)} scores per class kept`),
      tile("pAUC since start", format(start.pauc), `McClish ${format(start.pauc_standardized, 3)}`),
      tile("regret", format(regret?.regret), !regret ? metrics.regret_reason || "off"
        : regret.regret === null ? "undefined: the score is not linear (note below)"
        : `per pair · ${format(regret.regret_per_event, 3)} per event`),
      tile("pAUC gap", format(regret?.pauc_gap), regret ? `hindsight ${format(regret.hindsight_pauc)}` : ""),
      tile("events / s", format(throughput.events_per_second_recent, 1), `mean ${format(throughput.events_per_second_mean, 1)}`),
      queue
        ? tile("queue lag", `${count(queue.events)} ev`, `${format(queue.seconds, 1)} s · ${count(queue.entries)} entries`)
        : tile("queue lag", "–", state.config.mode === "queue" ? "not read yet" : "sync mode: learned on arrival"),
      tile("events learned", count(counts.events_learned), `version ${metrics.version}`),
      tile("drifts detected", count(metrics.drift?.detected),
        metrics.drift?.last_detected_at === null || metrics.drift?.last_detected_at === undefined
          ? `none yet · on drift: ${metrics.drift?.on_drift ?? "–"}`
          : `last at event ${count(metrics.drift.last_detected_at)} · on drift: ${metrics.drift.on_drift}`),
    ];
    $("tiles").replaceChildren(...tiles);
    $("regret-note").textContent = regret
      ? `On the last ${count(regret.n_events)} events (${regret.rounds} ${regret.rounds === 1 ? "round" : "rounds"}) against svm_pauc in hindsight.` +
        (regret.online_loss_note ? ` ${regret.online_loss_note}.` : "")
      : `Regret: ${metrics.regret_reason || "not tracked"}.`;
    $("lag-note").textContent = queue
      ? `Queue mode: ${count(queue.events)} events appended and not yet learned; oldest ${format(queue.seconds, 1)} s.`
      : "Sync mode: every request learns before it returns (no queue).";
  }

  function row(cells, className) {
    const tr = document.createElement("tr");
    if (className) tr.className = className;
    for (const [text, cellClass] of cells) {
      const td = document.createElement("td");
      td.textContent = text;
      if (cellClass) td.className = cellClass;
      tr.append(td);
    }
    return tr;
  }

  function renderCounts(metrics) {
    const { window: win, counts } = metrics;
    $("counts").tBodies[0].replaceChildren(
      row([[`window (last ${count(metrics.window_capacity)})`], [count(win.events)], [count(win.positives)], [count(win.negatives)]]),
      row([["since start"], [count(counts.events_learned)], [count(counts.positives)], [count(counts.negatives)]])
    );
    $("label-counts").tBodies[0].replaceChildren(
      ...[
        ["duplicate events ignored", counts.duplicates],
        ["delayed labels joined", counts.labels_joined],
        ["labels defaulted", counts.labels_defaulted],
        ["labels expired", counts.labels_expired],
      ].map(([label, value]) => row([[label], [count(value)]]))
    );
  }

  function renderLeaderboard(board) {
    const section = $("leaderboard");
    section.hidden = !board;
    if (!board) return;
    const challenger = board.challenger === null ? "none" : `#${board.challenger} (streak ${board.challenger_streak})`;
    const served =
      board.temperature > 0
        ? `Served: a mix of the candidates' standardised scores (shares below, temperature ${board.temperature}); leader`
        : "Served: leader";
    $("leaderboard-note").textContent =
      `${served} #${board.leader} since event ${count(board.leader_since)}; challenger ${challenger}; ` +
      `last evaluated at event ${count(board.evaluated_at)} on ${count(board.window)} events.`;
    section.querySelector("tbody").replaceChildren(
      ...board.candidates.map((candidate) =>
        row(
          [
            [String(candidate.index)],
            [candidate.learner],
            [parameterLines(candidate.params), "params"],
            [format(candidate.window_auc)],
            [format(candidate.window_pauc)],
            [`${(100 * candidate.weight).toFixed(1)} %`],
            [candidate.leader ? "leader" : ""],
          ],
          candidate.leader ? "leader" : ""
        )
      )
    );
  }

  /** A candidate's parameters as "key = value" lines (sorted; a list or an object compact
   * JSON): readable in a narrow column, where JSON wrapped character by character. */
  function parameterLines(params) {
    return Object.keys(params || {})
      .sort()
      .map((key) => {
        const value = params[key];
        return `${key} = ${typeof value === "object" && value !== null ? JSON.stringify(value) : String(value)}`;
      })
      .join("\n");
  }

  // ------------------------------------------------------------------ drawing (charts.js)
  function drawRoc(roc) {
    if (!state.charts) return;
    const plot = state.charts.roc;
    const element = $("roc-chart");
    const points = roc.fpr.length;
    const operating = roc.operating_points;
    // the points at the target FPRs, on the curve (undefined ones, one class missing, left out)
    state.charts.setOperatingPoints(operating.at_fpr.filter((point) => point.tpr !== null));
    drawOperatingTable(roc);
    if (points < 2) {
      plot.setData([[0, 1], [null, null], [0, 1]]);
      $("roc-note").textContent = "No curve yet: the window needs labelled events of both classes.";
    } else {
      plot.setData([roc.fpr, roc.tpr, roc.fpr]);
      $("roc-note").textContent = `${points.toLocaleString()} points from the window's ${roc.n_events.toLocaleString()} events; shaded: the pAUC's FPR range and the area counted.`;
    }
    $("roc-caption").textContent = `(version ${roc.version})`;
    element.dataset.points = String(points < 2 ? 0 : points);
    element.dataset.version = String(roc.version);
  }

  /** The window's operating points (GET .../metrics/roc): one row per target FPR, target alert
   * rate and k, and the average precision. */
  function drawOperatingTable(roc) {
    const { percent } = window.AucstreamCharts;
    const rate = (value) => (value === null ? "–" : percent(value));
    const { at_fpr: atFpr, at_alert_rate: atAlertRate, at_k: atK } = roc.operating_points;
    const atThreshold = (label, point) =>
      row([[label], [format(point.threshold)], [format(point.tpr)], [format(point.precision)], [rate(point.fpr)], [rate(point.alert_rate)]]);
    $("operating-points").tBodies[0].replaceChildren(
      ...atFpr.map((point) => atThreshold(`FPR ≤ ${percent(point.target)}`, point)),
      ...atAlertRate.map((point) => atThreshold(`alerts ≤ ${percent(point.target)}`, point)),
      ...atK.map((point) => row([[`top ${count(point.k)}`], ["–"], [format(point.recall)], [format(point.precision)], ["–"], ["–"]]))
    );
    $("operating-note").textContent =
      roc.reason !== null
        ? `Undefined: ${roc.reason}.`
        : `Average precision ${format(roc.average_precision)}. Each row flags the scores ≥ its threshold, the lowest one within the target (tied scores are flagged together); "top k" reviews the k highest scores.`;
  }

  function drawHistory(current) {
    if (!state.charts) return;
    const { history: historyChart, regret, throughput } = state.charts;
    const points = current.history;
    const column = (name) => points.map((point) => point[name]);
    const time = column("time");
    const since = time[0] - DRIFT_LOOKBACK_SECONDS;
    state.charts.setDrifts((current.drifts || []).filter((mark) => mark.time >= since));
    historyChart.setData([time, column("windowAuc"), column("windowPauc"), column("sinceStartAuc"), column("sinceStartPauc")]);
    $("history-note").textContent = idleNote(current, points);
    regret.setData([time, column("regret"), column("paucGap")]);
    throughput.setData([time, column("eventsPerSecond"), column("lagEvents")]);
    const version = String(points[points.length - 1].version);
    for (const id of ["history-chart", "regret-chart", "throughput-chart"]) {
      $(id).dataset.points = String(points.length);
      $(id).dataset.version = version;
    }
  }

  /** Under the AUC chart: the span of the history drawn, and since when the model is idle. */
  function idleNote(current, points) {
    const stored = points.filter((point) => point.stored).length;
    const span = points.length
      ? `${points.length.toLocaleString()} points from ${when(points[0].time)}` +
        (stored ? ` (${stored.toLocaleString()} from the server's history)` : "") + "."
      : "";
    const last = current.lastLearnedAt;
    if (last === null && !current.eventsLearned) return `${span} No events learned yet.`.trim();
    if (last !== null && Date.now() / 1000 - last > IDLE_SECONDS) return `${span} No events since ${when(last)}.`.trim();
    return span;
  }

  /** Unix seconds as the reader's local date and time, to the minute. */
  const when = (seconds) =>
    new Date(seconds * 1000).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });

  // ------------------------------------------------------------------ warm-up banner
  // A first start compiles the service's kernels for a minute or more; until then every /v1
  // request is refused (warming-up). The banner says how far the compilation is, from the
  // public /readyz (groups done, seconds so far, the server's estimate of the seconds left),
  // polled until the kernels are ready; then the page loads its data at once.
  const WARMUP_POLL_MS = 2000;
  let watchingWarmup = false;

  async function watchWarmup() {
    if (watchingWarmup) return; // one poll loop at a time
    watchingWarmup = true;
    const banner = $("warmup");
    let shown = false;
    for (;;) {
      let body = null;
      try {
        body = await (await fetch("/readyz", { cache: "no-store" })).json();
      } catch (_) {
        body = null; // the server is down or restarting: the API's own errors say so
      }
      if (body?.checks?.kernels !== "compiling" || !body.warmup) break;
      showWarmup(body.warmup);
      shown = true;
      await sleep(WARMUP_POLL_MS);
    }
    banner.hidden = true;
    watchingWarmup = false;
    if (shown) start(); // ready now: load the models without waiting for the next refresh
  }

  function showWarmup(progress) {
    const banner = $("warmup");
    banner.dataset.done = String(progress.groups_done);
    banner.dataset.total = String(progress.groups_total);
    banner.dataset.secondsLeft = String(progress.seconds_to_ready);
    $("warmup-text").textContent =
      `Warming up: compiling the kernels of the default path (${progress.groups_done} of ` +
      `${progress.groups_total} groups, ${Math.round(progress.elapsed_seconds)} s so far); ` +
      `ready in about ${Math.max(1, Math.round(progress.seconds_to_ready))} s.`;
    const bar = $("warmup-bar");
    bar.max = Math.max(1, progress.elapsed_seconds + progress.seconds_to_ready);
    bar.value = progress.elapsed_seconds;
    banner.hidden = false;
  }

  // ------------------------------------------------------------------ start
  let modelTimer = null;

  async function start() {
    clearInterval(modelTimer);
    try {
      state.config = await (await api("/dashboard/config")).json();
    } catch (error) {
      if (handleError(error)) setTimeout(start, 2000); // the server is down or restarting
      return;
    }
    $("forget-key").hidden = !apiKey();
    if (state.config.auth_required && !apiKey()) {
      askForKey(null);
      return;
    }
    await refreshModels();
    modelTimer = setInterval(refreshModels, MODEL_LIST_SECONDS * 1000);
  }

  window.addEventListener("hashchange", () => {
    const id = modelInHash();
    if (state.models.includes(id) && state.current?.id !== id) {
      $("notice").dataset.sticky = "false";
      notice(null);
      select(id);
    }
  });
  setupKeyDialog();
  watchWarmup();
  start();
})();
