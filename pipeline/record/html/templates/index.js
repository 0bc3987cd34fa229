(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("index-data").textContent);
  var body = document.querySelector("#history tbody");
  var rows = Array.prototype.slice.call(body.querySelectorAll("tr.record"));
  var controls = {
    model: document.getElementById("i-model"),
    dataset: document.getElementById("i-dataset"),
    verdict: document.getElementById("i-verdict")
  };
  [["model", "models"], ["dataset", "datasets"], ["verdict", "verdicts"]].forEach(function (pair) {
    data[pair[1]].forEach(function (item) { controls[pair[0]].appendChild(new Option(item, item)); });
  });
  var from = document.getElementById("i-from"), to = document.getElementById("i-to");
  var text = document.getElementById("i-text"), count = document.getElementById("i-count");
  function filter() {
    var t = text.value.trim().toLowerCase(), shown = 0;
    rows.forEach(function (row) {
      var d = row.dataset, day = d.created.slice(0, 10);
      var ok = (!controls.model.value || d.model === controls.model.value) &&
        (!controls.dataset.value || d.dataset === controls.dataset.value) &&
        (!controls.verdict.value || d.verdict === controls.verdict.value) &&
        (!from.value || day >= from.value) && (!to.value || day <= to.value) &&
        (!t || [d.run, d.command, d.reused, d.model, d.dataset].join(" ").toLowerCase().indexOf(t) >= 0);
      row.hidden = !ok;
      if (ok) { shown += 1; }
    });
    count.textContent = shown + " shown";
  }
  Object.keys(controls).forEach(function (k) { controls[k].addEventListener("change", filter); });
  [from, to].forEach(function (el) { el.addEventListener("change", filter); });
  text.addEventListener("input", filter);
  document.getElementById("index-filters").addEventListener("submit", function (e) { e.preventDefault(); });
  var headers = Array.prototype.slice.call(document.querySelectorAll("#history th[data-key]"));
  headers.forEach(function (th) {
    th.querySelector("button").addEventListener("click", function () {
      var key = th.dataset.key;
      var ascending = th.getAttribute("aria-sort") !== "ascending";
      headers.forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      rows.sort(function (a, b) {
        var x = a.dataset[key], y = b.dataset[key];
        var order = x < y ? -1 : (x > y ? 1 : 0);
        return ascending ? order : -order;
      });
      var fragment = document.createDocumentFragment();
      rows.forEach(function (row) { fragment.appendChild(row); });
      body.appendChild(fragment);
    });
  });
}());
