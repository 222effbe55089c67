"""Scripts that read MLflow's web UI in headless Chromium (tests/support/browser.py runs them): the runs view's
readiness and its table as text. Shared by the MLflow UI tests and the predictions-folder test, which reads the same
runs table."""

from __future__ import annotations

# true once the runs view shows every run named (%s: a JSON list of names)
RUNS_READY = """((names) => JSON.stringify({ready: document.readyState === 'complete' && location.hash.includes('/runs')
  && names.every(n => document.body.innerText.includes(n)) && document.body.innerText.includes('Dataset'), plots: 0}))(%s)"""
# the runs table as DOM text: column headers, and per row the text of its pinned and scrolling parts together
RUNS_TABLE = """(() => {
  const rows = {};
  document.querySelectorAll('.ag-row[row-index]').forEach(r => {
    const i = r.getAttribute('row-index');
    rows[i] = ((rows[i] || '') + ' ' + r.innerText.replace(/\\s+/g, ' ')).trim();
  });
  return JSON.stringify({url: location.href, rows: Object.values(rows),
    header: Array.from(document.querySelectorAll('[role=columnheader]')).map(h => h.innerText.trim())});
})()"""
