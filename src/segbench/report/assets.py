"""Static files written once into the site: style sheet and the table-sorting script."""

from __future__ import annotations

CSS = """
body { font-family: "DejaVu Sans", system-ui, sans-serif; margin: 0 auto; max-width: 78rem; padding: 0 1.5rem 3rem;
       color: #1a1a1a; line-height: 1.45; }
nav { border-bottom: 1px solid #ccc; padding: .6rem 0; margin-bottom: 1rem; font-size: .95rem; }
nav a { margin-right: 1rem; }
nav .sub a { margin-right: .6rem; }
a { color: #1f4e79; }
h1 { font-size: 1.6rem; margin: .8rem 0 .4rem; }
h2 { font-size: 1.3rem; margin-top: 2.2rem; border-bottom: 2px solid #1f4e79; padding-bottom: .2rem; }
h3 { font-size: 1.1rem; margin-top: 1.6rem; }
p.note { background: #fff7d6; border-left: 4px solid #c9a200; padding: .5rem .8rem; }
.relation-adds, .relation-withholds, .relation-opposite { font-weight: bold; }
p.headline { font-size: 1.05rem; background: #eef3f8; border-left: 4px solid #1f4e79; padding: .5rem .8rem; }
table { border-collapse: collapse; margin: .6rem 0 1.2rem; font-size: .9rem; }
caption { text-align: left; font-weight: bold; padding: .3rem 0; }
th, td { border: 1px solid #c8c8c8; padding: .25rem .5rem; text-align: left; vertical-align: top; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
th { background: #f0f0f0; }
th button { font: inherit; font-weight: bold; background: none; border: 0; padding: 0; cursor: pointer; color: inherit; }
th[aria-sort="ascending"] button::after { content: " ▲"; }
th[aria-sort="descending"] button::after { content: " ▼"; }
td .model { font-weight: 600; }
table.leaderboard td:nth-child(7) { min-width: 16rem; }
table.answers { font-size: .85rem; width: 100%; }
table.answers td { white-space: nowrap; padding: .1rem .4rem; }
table.answers caption { font-weight: normal; }
table.answers td:last-child { max-width: 15rem; overflow: hidden; text-overflow: ellipsis; }  /* the full list in its tooltip */
details > summary { cursor: pointer; color: #1f4e79; margin: .5rem 0; }
details.verdict > summary { margin: 0; color: inherit; }
details.verdict[open] { max-width: 40rem; white-space: normal; }
table.answers details.verdict { display: inline-block; }  /* its audited type-I error beside it, on one line */
.table-scroll { overflow-x: auto; }
.tag { display: inline-block; font-size: .72rem; font-weight: 600; padding: 0 .3rem; border-radius: .25rem;
       border: 1px solid #888; background: #fff; margin-left: .2rem; }
.tag-simulated { background: #fff1b8; }
.tag-published { background: #dbeafe; }
figure.plot { margin: .4rem 0 1.2rem; }
figure.plot figcaption { font-size: .85rem; color: #444; }
code { background: #f3f3f3; padding: 0 .2rem; }
.audit, .bounded { font-size: .75rem; color: #555; white-space: nowrap; margin-left: .3rem; }
.audit.warn { color: #8a1c00; font-weight: 600; }
/* a phone: the first table's rows as lines (cell, #1, mean [CI], verdict, co-winners) that wrap, never scroll sideways */
@media (max-width: 40rem) {
  body { padding: 0 .6rem 2rem; }
  caption { overflow-wrap: break-word; }
  table.answers, table.answers tbody, table.answers tr { display: block; width: auto; }
  table.answers thead { display: none; }
  table.answers tr { border-bottom: 1px solid #c8c8c8; padding: .3rem 0; }
  table.answers td { display: inline; border: 0; white-space: normal; padding: 0 .4rem 0 0; }
  table.answers td:last-child { display: block; max-width: none; }
}
"""

JS = """
"use strict";
document.querySelectorAll("table.sortable").forEach(function (table) {
  var headers = table.querySelectorAll("thead th");
  headers.forEach(function (th, col) {
    th.querySelector("button").addEventListener("click", function () {
      var ascending = th.getAttribute("aria-sort") !== "ascending";
      headers.forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[col].getAttribute("data-sort"), y = b.cells[col].getAttribute("data-sort");
        if (x === "" || y === "") { return (x === "") - (y === ""); }
        var nx = Number(x), ny = Number(y);
        var c = (isNaN(nx) || isNaN(ny)) ? x.localeCompare(y) : nx - ny;
        return ascending ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
// Plots inside a closed <details> are drawn at a default size: redraw them at their width when opened.
document.querySelectorAll("details").forEach(function (d) {
  d.addEventListener("toggle", function () {
    if (d.open && window.Plotly) { d.querySelectorAll(".plotly-graph-div").forEach(function (g) { Plotly.Plots.resize(g); }); }
  });
});
// A link to an anchor inside closed details (e.g. page.html#dice-source) opens them.
function openTarget() {
  var target = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
  for (var e = target; e; e = e.parentElement) { if (e.tagName === "DETAILS") { e.open = true; } }
  if (target) { target.scrollIntoView(); }
}
window.addEventListener("hashchange", openTarget);
openTarget();
"""
