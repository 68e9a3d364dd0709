// Studio dashboard: live regions refresh without a full reload, the run log streams over SSE,
// destructive forms ask first. Plain JS, no dependencies, nothing from another origin.
(function () {
  "use strict";
  var REFRESH_MS = 3000;

  function refresh() {
    var regions = document.querySelectorAll("[data-live]:not([data-final])");
    if (!regions.length || document.hidden) return;
    fetch(window.location.href, { headers: { "X-Studio-Refresh": "1" }, cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, "text/html");
        regions.forEach(function (old) {
          if (old.contains(document.activeElement)) return; // never under the user's cursor
          var next = old.id && fresh.getElementById(old.id);
          if (next) old.replaceWith(document.importNode(next, true));
        });
      })
      .catch(function () {});
  }

  function streamLog(pre) {
    if (!window.EventSource) return;
    var source = new EventSource(pre.getAttribute("data-sse"));
    var note = pre.querySelector("[data-log-note]");
    var lines = 0;
    source.onmessage = function (event) {
      if (note) { note.remove(); note = null; }
      lines += 1;
      pre.append(event.data + "\n");
      pre.scrollTop = pre.scrollHeight;
    };
    source.addEventListener("end", function (event) {
      if (note && !lines) note.textContent = "no output";
      pre.setAttribute("data-ended", event.data || "");
      source.close();
    });
    source.onerror = function () { if (source.readyState === EventSource.CLOSED) source.close(); };
  }

  // The create form shows the inputs of the chosen trigger type and action kind only (without
  // script every input shows; the server sends only the chosen ones to the API either way).
  function showChosen(form) {
    form.querySelectorAll("[data-when]").forEach(function (el) {
      var rule = el.getAttribute("data-when").split(":");
      var control = form.elements[rule[0]];
      el.hidden = !!control && rule[1].split(" ").indexOf(control.value) < 0;
    });
  }

  document.addEventListener("change", function (event) {
    if (event.target.hasAttribute && event.target.hasAttribute("data-switch")) {
      showChosen(event.target.form);
    }
  });

  document.addEventListener("submit", function (event) {
    var question = event.target.getAttribute && event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
  });

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("pre[data-sse]").forEach(streamLog);
    document.querySelectorAll("form.create-form").forEach(showChosen);
    if (document.querySelector("[data-live]")) window.setInterval(refresh, REFRESH_MS);
  });
})();
