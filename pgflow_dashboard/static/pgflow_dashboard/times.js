/* pgflow dashboard: every moment (a <time data-pgflow-time> the `when` filter wrote, in the
   site's zone) re-rendered in the viewer's own zone, in the same one format; the title keeps
   the UTC moment for hover. */
(function () {
  "use strict";

  function pad(n, width) {
    var text = String(n);
    while (text.length < (width || 2)) text = "0" + text;
    return text;
  }

  function render(node) {
    var when = new Date(node.getAttribute("datetime"));
    if (isNaN(when.getTime())) return;
    var clock = pad(when.getHours()) + ":" + pad(when.getMinutes()) + ":" + pad(when.getSeconds());
    var day = when.getFullYear() + "-" + pad(when.getMonth() + 1) + "-" + pad(when.getDate());
    var form = node.getAttribute("data-pgflow-time");
    if (form === "time") node.textContent = clock;
    else if (form === "ms") node.textContent = day + " " + clock + "." + pad(when.getMilliseconds(), 3);
    else node.textContent = day + " " + clock;
    var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    if (zone && node.title.indexOf("your time") === -1) node.title = node.title + " (shown in your time, " + zone + ")";
  }

  function start() {
    document.querySelectorAll("time[data-pgflow-time]").forEach(render);
  }

  window.pgflowTimes = start; // for pages that add rows later
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
