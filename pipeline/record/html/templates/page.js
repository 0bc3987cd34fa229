(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("page-data").textContent);
  function fill(select, items) {
    items.forEach(function (item) { select.appendChild(new Option(item, item)); });
  }
  var verdict = document.getElementById("f-verdict");
  var category = document.getElementById("f-category");
  var feature = document.getElementById("f-feature");
  var count = document.getElementById("f-count");
  fill(verdict, data.verdicts);
  fill(category, data.categories);
  var rows = Array.prototype.slice.call(document.querySelectorAll("#rows tr.row"));
  function evidenceRow(row) {
    var next = row.nextElementSibling;
    return next && next.classList.contains("ev") ? next : null;
  }
  function filter() {
    var v = verdict.value, c = category.value, f = feature.value.trim().toLowerCase();
    var shown = 0;
    rows.forEach(function (row) {
      var ok = (!v || row.dataset.verdict === v) && (!c || row.dataset.category === c) &&
        (!f || row.dataset.feature.toLowerCase().indexOf(f) >= 0 || row.dataset.check.toLowerCase().indexOf(f) >= 0);
      row.hidden = !ok;
      var ev = evidenceRow(row);
      if (ev && !ok) { ev.hidden = true; var b = row.querySelector("button.fold"); if (b) { b.setAttribute("aria-expanded", "false"); b.textContent = "▸"; } }
      if (ok) { shown += 1; }
    });
    count.textContent = shown + " shown";
  }
  [verdict, category].forEach(function (el) { el.addEventListener("change", filter); });
  feature.addEventListener("input", filter);
  document.getElementById("row-filters").addEventListener("submit", function (e) { e.preventDefault(); });
  document.getElementById("rows").addEventListener("click", function (e) {
    var button = e.target.closest("button.fold");
    if (!button) { return; }
    var ev = evidenceRow(button.closest("tr"));
    if (!ev) { return; }
    ev.hidden = !ev.hidden;
    button.setAttribute("aria-expanded", String(!ev.hidden));
    button.textContent = ev.hidden ? "▸" : "▾";
  });
  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id && document.getElementById(id);
    if (target && target.tagName === "DETAILS") { target.open = true; target.scrollIntoView(); }
  }
  window.addEventListener("hashchange", openTarget);
  openTarget();
  function setAll(open) {
    document.querySelectorAll("details.finding").forEach(function (d) { d.open = open; });
  }
  var copy = document.getElementById("copy-line");
  if (copy) {
    copy.addEventListener("click", function () {
      var text = document.getElementById("corrected-line").textContent;
      var said = document.getElementById("copy-said");
      navigator.clipboard.writeText(text).then(function () { said.textContent = "copied"; },
        function () { said.textContent = "copy refused: select the line"; });
    });
  }
  var openAll = document.getElementById("open-all");
  if (openAll) {
    openAll.addEventListener("click", function () { setAll(true); });
    document.getElementById("close-all").addEventListener("click", function () { setAll(false); });
  }
}());
