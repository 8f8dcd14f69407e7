// Live updates of the dashboard (docs/dashboard.md, "Live updates"): every element marked
// `data-live="URL"` is replaced, every two seconds while the tab is visible, by the element of
// the same id in a fresh copy of URL, when that differs. Nothing runs while the tab is hidden;
// a visible tab refreshes at once. An element holding the keyboard focus or the reader's text
// selection waits for the next refresh, so a button being pressed or text being copied is
// never swapped away; so does one with a ticked checkbox (jobs selected for a bulk action). A logged-out session (the answer is the login page) or a refused request
// (4xx) stops the updates until the page is loaded again; a server error or no answer within
// ten seconds is tried again at the next period.
(function () {
  "use strict";
  var PERIOD_MS = 2000;
  var TIMEOUT_MS = 10000;
  var busy = false;
  var stopped = false;

  function regions() {
    return document.querySelectorAll("[data-live][id]");
  }

  // Whether the reader is using `region`: focus or a text selection inside it.
  function inUse(region) {
    if (region.querySelector("input[type=checkbox]:checked")) {
      return true;
    }
    var focused = document.activeElement;
    if (focused && focused !== document.body && region.contains(focused)) {
      return true;
    }
    var selection = window.getSelection();
    return !!selection && !selection.isCollapsed && selection.rangeCount > 0 &&
      region.contains(selection.getRangeAt(0).commonAncestorContainer);
  }

  function replace(fresh) {
    regions().forEach(function (region) {
      var next = fresh.getElementById(region.id);
      if (!next || inUse(region) || next.outerHTML === region.outerHTML) {
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
    var abort = new AbortController();
    var timer = setTimeout(function () { abort.abort(); }, TIMEOUT_MS);
    fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" }, signal: abort.signal })
      .then(function (answer) {
        if (answer.redirected || (answer.status >= 400 && answer.status < 500)) {
          stopped = true;
          return null;
        }
        return answer.ok ? answer.text() : null;
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
        clearTimeout(timer);
        busy = false;
      });
  }

  setInterval(refresh, PERIOD_MS);
  document.addEventListener("visibilitychange", refresh);
})();
