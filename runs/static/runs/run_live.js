// The run page follows its run's Server-Sent Events (the element with
// data-run-stream names the stream) and tells htmx the run moved: the live parts of
// the page (header, steps, timeline, newest events) listen for "run-moved" on <body>.
// Moves within a quarter second are told once. A terminal event ends the stream; the
// page's refresh on a state change then shows the finished run without one.
(function () {
  "use strict";
  var TERMINAL = ["run.succeeded", "run.failed", "run.cancelled"];
  function follow() {
    var holder = document.querySelector("[data-run-stream]");
    if (!holder || !window.EventSource) {
      return;
    }
    var source = new EventSource(holder.getAttribute("data-run-stream"));
    var pending = null;
    function moved() {
      if (pending === null) {
        pending = window.setTimeout(function () {
          pending = null;
          document.body.dispatchEvent(new CustomEvent("run-moved"));
        }, 250);
      }
    }
    source.onmessage = function (message) {
      var type = "";
      try {
        type = JSON.parse(message.data).type;
      } catch (ignored) {
        // Not an event document: still a sign of movement.
      }
      moved();
      if (TERMINAL.indexOf(type) >= 0) {
        source.close();
      }
    };
    window.addEventListener("pagehide", function () {
      source.close();
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", follow);
  } else {
    follow();
  }
})();
