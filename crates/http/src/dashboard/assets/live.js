// Live updates of the dashboard (docs/dashboard.md, "Live updates"): every element marked
// `data-live="URL"` is replaced, every two seconds while the tab is visible, by the element of
// the same id in a fresh copy of URL. Nothing runs while the tab is hidden; a visible tab
// refreshes at once. An element holding the keyboard focus waits for the next refresh, so a
// button being pressed is never swapped away. A logged-out session (the answer is the login
// page) or an error answer stops the updates until the page is loaded again.
(function () {
  "use strict";
  var PERIOD_MS = 2000;
  var busy = false;
  var stopped = false;

  function regions() {
    return document.querySelectorAll("[data-live][id]");
  }

  function replace(fresh) {
    regions().forEach(function (region) {
      var next = fresh.getElementById(region.id);
      var focused = document.activeElement;
      if (!next || (focused && focused !== document.body && region.contains(focused))) {
        return;
      }
      region.replaceWith(document.importNode(next, true));
    });
  }

  function refresh() {
    if (busy || stopped || document.visibilityState !== "visible") {
      return;
    }
    var live = regions();
    if (live.length === 0) {
      return;
    }
    var url = live[0].getAttribute("data-live");
    busy = true;
    fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (answer) {
        if (!answer.ok || answer.redirected) {
          stopped = true;
          return null;
        }
        return answer.text();
      })
      .then(function (html) {
        if (html !== null) {
          replace(new DOMParser().parseFromString(html, "text/html"));
          document.documentElement.setAttribute("data-live-updated", String(Date.now()));
        }
      })
      .catch(function () {
        // The server is unreachable for now: try again at the next period.
      })
      .finally(function () {
        busy = false;
      });
  }

  setInterval(refresh, PERIOD_MS);
  document.addEventListener("visibilitychange", refresh);
})();
