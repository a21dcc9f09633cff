"use strict";
// Open the evidence panel a link points at, let readers open or close all of them, and show
// every figure of the selection matrix on demand.
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
        document.querySelectorAll("details.evidence, details.evidence-shared").forEach(function (d) {
          d.open = open;
        });
      });
    });
    var all = document.getElementById("all-figures");
    var matrices = document.querySelectorAll("table.matrix");
    if (all && matrices.length) {
      all.addEventListener("click", function () {
        var on = all.getAttribute("aria-pressed") !== "true";
        matrices.forEach(function (m) { m.classList.toggle("all", on); });
        all.setAttribute("aria-pressed", on ? "true" : "false");
        all.textContent = on ? "fewer figures" : "show all figures";
      });
    }
  });
})();
