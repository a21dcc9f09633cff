"use strict";
// Open the evidence panel a link points at, and let readers open or close all of them.
(function () {
  function openTarget() {
    var id = decodeURIComponent(window.location.hash.slice(1));
    var el = id ? document.getElementById(id) : null;
    if (el && el.tagName === "DETAILS") {
      el.open = true;
      el.scrollIntoView();
    }
  }
  window.addEventListener("hashchange", openTarget);
  document.addEventListener("DOMContentLoaded", function () {
    openTarget();
    document.querySelectorAll("button[data-toggle]").forEach(function (btn) {
      btn.addEventListener("click", function () {
        var open = btn.getAttribute("data-toggle") === "open";
        document.querySelectorAll("details.evidence").forEach(function (d) { d.open = open; });
      });
    });
  });
})();
