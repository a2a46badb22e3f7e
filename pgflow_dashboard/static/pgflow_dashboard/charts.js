/* pgflow dashboard charts, drawn with the vendored Chart.js 4 UMD build (window.Chart).
 *
 * The run page: a range-bar timeline, one bar row per attempt, floating bars
 * ([from, to] in epoch milliseconds) on a linear x axis, so no date adapter is needed;
 * one dataset per series of pgflow_dashboard.timeline.SERIES; the run's paused periods
 * as bands across all rows (the inline plugin below); an HTML tooltip with the
 * segment's kind and duration. An open run's timeline refreshes itself from
 * timeline.json until the run is finished or cancelled.
 *
 * The insights page: stacked bars per bucket, and the p95 of each phase per bucket as
 * lines on a log-scale duration axis.
 *
 * Data comes from json_script blocks; text from the run reaches the DOM only through
 * textContent, never innerHTML. No build step.
 */
(function () {
  "use strict";

  var SECOND = 1000, MINUTE = 60 * SECOND, HOUR = 60 * MINUTE, DAY = 24 * HOUR;
  // Tick steps a reader can count in, smallest first; the axis takes the first giving <= 8 ticks.
  var STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, SECOND, 2 * SECOND, 5 * SECOND, 10 * SECOND,
    15 * SECOND, 30 * SECOND, MINUTE, 2 * MINUTE, 5 * MINUTE, 10 * MINUTE, 15 * MINUTE, 30 * MINUTE,
    HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, 2 * DAY, 7 * DAY, 14 * DAY, 30 * DAY];
  var TERMINAL = { finished: true, cancelled: true };

  function readJSON(id) {
    var node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }

  function formatter(timeZone, options) {
    try {
      return new Intl.DateTimeFormat(undefined, Object.assign({ timeZone: timeZone, hourCycle: "h23" }, options));
    } catch (error) { // an unknown zone name: fall back to UTC rather than draw nothing
      return new Intl.DateTimeFormat(undefined, Object.assign({ timeZone: "UTC", hourCycle: "h23" }, options));
    }
  }

  // A tick label fine enough for the step between ticks: milliseconds for a run of three
  // seconds, the day for one of thirty days.
  function tickFormat(step, span, timeZone) {
    if (step < SECOND) {
      return formatter(timeZone, { hour: "2-digit", minute: "2-digit", second: "2-digit", fractionalSecondDigits: 3 });
    }
    if (step < MINUTE) return formatter(timeZone, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
    if (step < DAY && span < 2 * DAY) return formatter(timeZone, { hour: "2-digit", minute: "2-digit" });
    if (step < DAY) return formatter(timeZone, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
    return formatter(timeZone, { month: "short", day: "numeric" });
  }

  function niceStep(span) {
    for (var i = 0; i < STEPS.length; i++) {
      if (span / STEPS[i] <= 7) return STEPS[i];
    }
    return STEPS[STEPS.length - 1];
  }

  function showError(node, message) {
    if (!node) return;
    node.textContent = message;
    node.classList.add("pgflow-chart-error");
  }

  // --- the run timeline ------------------------------------------------------------------

  function timelineExtent(data) {
    var min = Infinity, max = -Infinity;
    data.rows.forEach(function (row) {
      row.segments.forEach(function (segment) {
        min = Math.min(min, segment.from);
        max = Math.max(max, segment.to);
      });
    });
    data.paused.forEach(function (period) {
      min = Math.min(min, period.from);
      max = Math.max(max, period.to);
    });
    if (!isFinite(min)) { min = data.now - MINUTE; max = data.now; }
    if (max - min < 10) max = min + 10; // a zero-length run still gets an axis
    return { min: min, max: max };
  }

  // One dataset per series; data[i] is row i's [from, to] for that series, or null. The
  // segment objects ride along for the tooltip.
  function timelineDatasets(data, series) {
    return Object.keys(series).filter(function (name) { return name !== "paused"; }).map(function (name) {
      var segments = data.rows.map(function (row) {
        for (var i = 0; i < row.segments.length; i++) {
          if (row.segments[i].series === name) return row.segments[i];
        }
        return null;
      });
      return {
        label: series[name].label,
        series: name,
        backgroundColor: series[name].colour,
        borderColor: series[name].colour,
        data: segments.map(function (s) { return s ? [s.from, s.to] : null; }),
        segments: segments,
        grouped: false, // all series of a row share its band: they never overlap in time
        barPercentage: 0.9,
        categoryPercentage: 0.9,
        minBarLength: 2, // a 50 ms body stays visible on a 30-day axis
        borderSkipped: false,
      };
    }).filter(function (dataset) {
      return dataset.segments.some(function (s) { return s !== null; });
    });
  }

  // Paused periods as bands across every row, under the bars.
  var pausedBands = {
    id: "pgflowPausedBands",
    beforeDatasetsDraw: function (chart, args, options) {
      var periods = options.periods || [];
      if (!periods.length) return;
      var area = chart.chartArea, x = chart.scales.x, ctx = chart.ctx;
      ctx.save();
      ctx.fillStyle = options.colour;
      ctx.globalAlpha = 0.45;
      periods.forEach(function (period) {
        var left = Math.max(x.getPixelForValue(period.from), area.left);
        var right = Math.min(x.getPixelForValue(period.to), area.right);
        if (right > left) ctx.fillRect(left, area.top, Math.max(right - left, 2), area.bottom - area.top);
      });
      ctx.restore();
    },
  };

  function placeTooltip(tip, canvas, x, y) {
    var box = tip.parentNode.getBoundingClientRect();
    var rect = canvas.getBoundingClientRect();
    tip.hidden = false;
    var left = rect.left - box.left + x + 12;
    var maxLeft = box.width - tip.offsetWidth - 4;
    tip.style.left = Math.max(0, Math.min(left, maxLeft)) + "px";
    tip.style.top = (rect.top - box.top + y + 12) + "px";
  }

  function fillTooltip(tip, title, lines) {
    tip.textContent = "";
    var heading = document.createElement("strong");
    heading.textContent = title;
    tip.appendChild(heading);
    lines.forEach(function (line) {
      var div = document.createElement("div");
      div.textContent = line;
      tip.appendChild(div);
    });
  }

  function timelineChart() {
    var canvas = document.getElementById("pgflow-timeline");
    var data = readJSON("pgflow-timeline-data");
    var config = readJSON("pgflow-timeline-config");
    var status = document.getElementById("pgflow-timeline-status");
    var tip = document.getElementById("pgflow-tooltip");
    var box = document.getElementById("pgflow-timeline-box");
    if (!canvas || !data || !config) return;
    if (typeof Chart === "undefined") {
      showError(status, "The timeline could not be drawn: Chart.js did not load.");
      return;
    }
    var series = config.series;
    var clock = formatter(config.time_zone, {
      year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
      fractionalSecondDigits: 3,
    });
    var state = { data: data };

    function sizeBox(rows) {
      box.style.height = Math.max(120, rows * 26 + 64) + "px";
    }

    function axisFor(extent) {
      var span = extent.max - extent.min;
      var step = niceStep(span);
      var format = tickFormat(step, span, config.time_zone);
      return {
        type: "linear",
        min: extent.min,
        max: extent.max,
        position: "top",
        // Ticks on whole multiples of the step (12:00:00.500, not 12:00:00.137), inside the
        // data's extent so the bars use the whole width.
        afterBuildTicks: function (scale) {
          var ticks = [];
          for (var value = Math.ceil(extent.min / step) * step; value <= extent.max; value += step) {
            ticks.push({ value: value });
          }
          if (ticks.length >= 2) scale.ticks = ticks;
        },
        ticks: {
          maxRotation: 0,
          autoSkip: true,
          callback: function (value) { return format.format(new Date(value)); },
        },
        grid: { color: "rgba(127, 127, 127, 0.15)" },
      };
    }

    function pausedAt(x) {
      var scale = chart.scales.x, value = scale.getValueForPixel(x);
      for (var i = 0; i < state.data.paused.length; i++) {
        var period = state.data.paused[i];
        if (value >= period.from && value <= period.to) return period;
      }
      return null;
    }

    sizeBox(data.rows.length);
    var chart = new Chart(canvas, {
      type: "bar",
      data: { labels: data.rows.map(function (row) { return row.label; }), datasets: timelineDatasets(data, series) },
      options: {
        indexAxis: "y",
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        interaction: { mode: "point", intersect: true },
        scales: {
          x: axisFor(timelineExtent(data)),
          y: { ticks: { autoSkip: false, font: { family: "ui-monospace, monospace", size: 11 } }, grid: { display: false } },
        },
        plugins: {
          legend: { display: false }, // the page prints the legend, with the paused band's colour
          pgflowPausedBands: { periods: data.paused, colour: series.paused.colour },
          tooltip: {
            enabled: false,
            external: function (context) {
              var tooltip = context.tooltip;
              if (tooltip.opacity === 0 || !tooltip.dataPoints || !tooltip.dataPoints.length) {
                tip.hidden = true;
                return;
              }
              var point = tooltip.dataPoints[0];
              var segment = point.dataset.segments[point.dataIndex];
              var row = state.data.rows[point.dataIndex];
              if (!segment || !row) { tip.hidden = true; return; }
              var lines = [segment.kind + ": " + segment.duration,
                clock.format(new Date(segment.from)) + " → " + clock.format(new Date(segment.to))];
              if (segment.note) lines.push(segment.note); // a child batch: how many, how many ended
              if (row.error_class) lines.push("error: " + row.error_class);
              fillTooltip(tip, row.label + " (" + row.status + ")", lines);
              placeTooltip(tip, canvas, tooltip.caretX, tooltip.caretY);
            },
          },
        },
        onHover: function (event, elements) {
          // Over a paused band but no bar: say so.
          if (elements.length || !state.data.paused.length) return;
          var area = chart.chartArea;
          if (event.x < area.left || event.x > area.right || event.y < area.top || event.y > area.bottom) {
            tip.hidden = true;
            return;
          }
          var period = pausedAt(event.x);
          if (!period) { tip.hidden = true; return; }
          fillTooltip(tip, "run paused", ["paused: " + period.duration,
            clock.format(new Date(period.from)) + " → " + clock.format(new Date(period.to))]);
          placeTooltip(tip, canvas, event.x, event.y);
        },
      },
      plugins: [pausedBands],
    });
    canvas.addEventListener("mouseleave", function () { tip.hidden = true; });
    window.pgflowTimeline = chart; // for the browser tests and for curious operators

    function redraw(fresh) {
      state.data = fresh;
      sizeBox(fresh.rows.length);
      chart.data.labels = fresh.rows.map(function (row) { return row.label; });
      chart.data.datasets = timelineDatasets(fresh, series);
      chart.options.scales.x = axisFor(timelineExtent(fresh));
      chart.options.plugins.pgflowPausedBands.periods = fresh.paused;
      chart.update("none");
    }

    if (!config.poll_ms || TERMINAL[data.status]) return;
    var timer = window.setInterval(function () {
      fetch(config.url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) {
          if (!response.ok) throw new Error("HTTP " + response.status);
          var type = response.headers.get("Content-Type") || "";
          if (type.indexOf("application/json") !== 0) throw new Error("not JSON (signed out?)");
          return response.json();
        })
        .then(function (fresh) {
          redraw(fresh);
          status.classList.remove("pgflow-chart-error");
          if (TERMINAL[fresh.status]) {
            window.clearInterval(timer);
            status.textContent = "The run is " + fresh.status + ". Reload the page for its steps and audit trail.";
          } else {
            status.textContent = "Refreshed at " + clock.format(new Date(fresh.now)) + ".";
          }
        })
        .catch(function (error) {
          window.clearInterval(timer);
          showError(status, "The timeline stopped refreshing: " + error.message + ". Reload the page.");
        });
    }, config.poll_ms);
  }

  // --- insights ----------------------------------------------------------------------------

  var RUN_SERIES = [
    { key: "started", label: "started", colour: "#2563eb", stack: "started" },
    { key: "finished", label: "finished", colour: "#16a34a", stack: "ended" },
    { key: "cancelled", label: "cancelled", colour: "#7c3aed", stack: "ended" },
  ];
  var FAILURE_SERIES = [
    { key: "reattempted", label: "reattempted", colour: "#f59e0b" },
    { key: "paused", label: "paused the run", colour: "#db2777" },
    { key: "cancelled", label: "cancelled the run", colour: "#7c3aed" },
    { key: "skipped", label: "skipped", colour: "#64748b" },
    { key: "other", label: "other (lost worker …)", colour: "#dc2626" },
  ];

  function bucketLabels(buckets, seconds, timeZone) {
    var options = seconds >= 86400 ? { month: "short", day: "numeric" }
      : seconds >= 21600 ? { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" }
        : { hour: "2-digit", minute: "2-digit" };
    var format = formatter(timeZone, options);
    return buckets.map(function (bucket) { return format.format(new Date(bucket.start)); });
  }

  function bucketWords(seconds) {
    if (seconds >= 86400) return (seconds / 86400) + " d";
    if (seconds >= 3600) return (seconds / 3600) + " h";
    return (seconds / 60) + " min";
  }

  // Bars with their units on both axes; a tooltip names the bucket's full date and span, and
  // (with onBar) a click on a bar leads to what it counts.
  function stackedBars(canvasId, labels, datasets, axes) {
    var canvas = document.getElementById(canvasId);
    if (!canvas) return null;
    var full = formatter(axes.timeZone, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
    return new Chart(canvas, {
      type: "bar",
      data: { labels: labels, datasets: datasets },
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        interaction: { mode: "index", intersect: false },
        onClick: function (event, elements) {
          if (axes.onBar && elements.length) axes.onBar(elements[0].index);
        },
        scales: {
          x: { stacked: true, ticks: { maxRotation: 0, autoSkip: true },
            title: { display: true, text: "bucket start (" + axes.timeZone + "), " + bucketWords(axes.bucketSeconds) + " a bar" } },
          y: { stacked: true, beginAtZero: true, ticks: { precision: 0 }, title: { display: true, text: axes.y } },
        },
        plugins: {
          legend: { position: "bottom" },
          tooltip: { callbacks: { title: function (items) {
            if (!items.length) return "";
            return full.format(new Date(axes.starts[items[0].dataIndex])) + " + " + bucketWords(axes.bucketSeconds);
          } } },
        },
      },
    });
  }

  // A duration for an axis or a tooltip: "250 ms", "3.2 s", "4 min", "2.5 h", "3 d".
  function seconds(value) {
    if (value < 1) return Math.round(value * 1000 * 10) / 10 + " ms";
    if (value < 60) return Math.round(value * 10) / 10 + " s";
    if (value < 3600) return Math.round(value / 6) / 10 + " min";
    if (value < 86400) return Math.round(value / 360) / 10 + " h";
    return Math.round(value / 8640) / 10 + " d";
  }

  var DURATION_TICKS = [0.001, 0.01, 0.1, 1, 10, 60, 600, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400];
  var LOG_FLOOR = 0.001; // a p95 under 1 ms (or of 0) sits on the axis floor: a log axis has no 0

  // One line per phase: the p95 of the attempts that ended in each bucket; a bucket where
  // none ended is a gap, not a zero.
  function latencyLines(data) {
    var canvas = document.getElementById("pgflow-latency-chart");
    if (!canvas || !data.latency) return null;
    var labels = bucketLabels(data.latency, data.bucket_seconds, data.time_zone);
    var full = formatter(data.time_zone, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
    var datasets = data.latency_series.map(function (s) {
      return {
        label: s.label, phase: s.key, borderColor: s.colour, backgroundColor: s.colour,
        pointRadius: 3, pointHoverRadius: 5, borderWidth: 2, spanGaps: false, tension: 0,
        data: data.latency.map(function (bucket) {
          var value = bucket[s.key];
          return value === null || value === undefined ? null : Math.max(value, LOG_FLOOR);
        }),
        seconds: data.latency.map(function (bucket) { return bucket[s.key]; }),
      };
    }).filter(function (dataset) {
      return dataset.data.some(function (value) { return value !== null; });
    });
    return new Chart(canvas, {
      type: "line",
      data: { labels: labels, datasets: datasets },
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        interaction: { mode: "index", intersect: false },
        scales: {
          x: { ticks: { maxRotation: 0, autoSkip: true },
            title: { display: true, text: "bucket start (" + data.time_zone + "), " + bucketWords(data.bucket_seconds) + " a point" } },
          y: { type: "logarithmic",
            // The axis spans whole ticks around the data; ticks on durations a reader counts
            // in (1 s, 1 min, 1 h), not on powers of ten.
            afterDataLimits: function (scale) {
              var below = DURATION_TICKS.filter(function (value) { return value <= scale.min; });
              var above = DURATION_TICKS.filter(function (value) { return value >= scale.max; });
              if (below.length) scale.min = below[below.length - 1];
              if (above.length) scale.max = above[0];
            },
            afterBuildTicks: function (scale) {
              var ticks = DURATION_TICKS.filter(function (value) { return value >= scale.min && value <= scale.max; });
              if (ticks.length >= 2) scale.ticks = ticks.map(function (value) { return { value: value }; });
            },
            ticks: { autoSkip: false, callback: function (value) { return seconds(value); } },
            title: { display: true, text: "p95 duration (log scale)" } },
        },
        plugins: {
          legend: { position: "bottom" },
          tooltip: { callbacks: {
            title: function (items) {
              if (!items.length) return "";
              return full.format(new Date(data.latency[items[0].dataIndex].start)) + " + " + bucketWords(data.bucket_seconds);
            },
            label: function (item) {
              var value = item.dataset.seconds[item.dataIndex];
              return item.dataset.label + ": p95 " + (value < LOG_FLOOR ? "under 1 ms" : seconds(value));
            },
          } },
        },
      },
    });
  }

  function insightsCharts() {
    var data = readJSON("pgflow-insights-data");
    if (!data) return;
    if (typeof Chart === "undefined") {
      document.querySelectorAll(".pgflow-chart-box-insights").forEach(function (box) {
        showError(box, "The chart could not be drawn: Chart.js did not load.");
      });
      return;
    }
    var runLabels = bucketLabels(data.runs, data.bucket_seconds, data.time_zone);
    var starts = data.runs.map(function (bucket) { return bucket.start; });
    window.pgflowRunsChart = stackedBars("pgflow-runs-chart", runLabels, RUN_SERIES.map(function (s) {
      return { label: s.label, stack: s.stack, backgroundColor: s.colour,
        data: data.runs.map(function (bucket) { return bucket[s.key]; }) };
    }), { y: "runs", timeZone: data.time_zone, bucketSeconds: data.bucket_seconds, starts: starts,
      // A bar leads to the runs started in its bucket.
      onBar: function (index) {
        if (!data.runs_url) return;
        var from = new Date(starts[index]);
        var to = new Date(from.getTime() + data.bucket_seconds * 1000);
        window.location.href = data.runs_url + "?created_at__gte=" + encodeURIComponent(from.toISOString()) +
          "&created_at__lt=" + encodeURIComponent(to.toISOString());
      } });
    var failureLabels = bucketLabels(data.failures, data.bucket_seconds, data.time_zone);
    window.pgflowFailuresChart = stackedBars("pgflow-failures-chart", failureLabels, FAILURE_SERIES.map(function (s) {
      return { label: s.label, stack: "failures", backgroundColor: s.colour,
        data: data.failures.map(function (bucket) {
          if (s.key !== "other") return bucket[s.key];
          return bucket.failures - bucket.reattempted - bucket.paused - bucket.cancelled - bucket.skipped;
        }) };
    }), { y: "failed attempts", timeZone: data.time_zone, bucketSeconds: data.bucket_seconds,
      starts: data.failures.map(function (bucket) { return bucket.start; }),
      // A bar leads to the runs with an attempt that failed in its bucket (failed:<from>..<until>).
      onBar: function (index) {
        if (!data.runs_url) return;
        var from = new Date(data.failures[index].start);
        var to = new Date(from.getTime() + data.bucket_seconds * 1000);
        window.location.href = data.runs_url + "?q=" +
          encodeURIComponent("failed:" + from.toISOString() + ".." + to.toISOString());
      } });
    window.pgflowLatencyChart = latencyLines(data);
  }

  // --- forms -------------------------------------------------------------------------------

  function confirmations() {
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        if (!window.confirm(form.getAttribute("data-confirm"))) event.preventDefault();
      });
    });
  }

  // The step table: "More" shows the row's full error and output in the row below it.
  function expanders() {
    document.querySelectorAll("button.pgflow-expand").forEach(function (button) {
      button.addEventListener("click", function () {
        var detail = document.getElementById(button.getAttribute("aria-controls"));
        if (!detail) return;
        var open = detail.hidden;
        detail.hidden = !open;
        button.setAttribute("aria-expanded", open ? "true" : "false");
        button.textContent = open ? "Less" : "More";
      });
    });
  }

  // Axis and legend text in the admin's own quiet colour, so both its themes read well.
  function themeColours() {
    if (typeof Chart === "undefined") return;
    var quiet = getComputedStyle(document.documentElement).getPropertyValue("--body-quiet-color").trim();
    if (quiet) Chart.defaults.color = quiet;
  }

  function start() {
    confirmations();
    expanders();
    themeColours();
    timelineChart();
    insightsCharts();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
