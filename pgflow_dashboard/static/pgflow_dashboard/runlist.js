/* pgflow dashboard, the run list: reloads itself every few seconds so the badges stay live;
   the operator pauses it with the button (remembered in this browser), and it never reloads
   while a run is ticked for an action. */
(function () {
  "use strict";
  var KEY = "pgflow.runlist.refresh";

  function start() {
    var button = document.getElementById("pgflow-refresh");
    if (!button) return;
    var seconds = parseInt(button.getAttribute("data-seconds"), 10) || 15;
    var on = window.localStorage.getItem(KEY) !== "paused";
    var timer = null;

    function show() {
      button.setAttribute("aria-pressed", on ? "true" : "false");
      button.textContent = on ? "Auto-refresh: on (pause)" : "Auto-refresh: paused (resume)";
    }

    function schedule() {
      if (timer) window.clearTimeout(timer);
      timer = on ? window.setTimeout(function () {
        var ticked = document.querySelector("#result_list input.action-select:checked");
        if (ticked) schedule(); else window.location.reload();
      }, seconds * 1000) : null;
    }

    button.addEventListener("click", function () {
      on = !on;
      window.localStorage.setItem(KEY, on ? "on" : "paused");
      show();
      schedule();
    });
    show();
    schedule();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
