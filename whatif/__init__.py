"""``remediate compare``: one fault timeline under several policies, through the real system.

- ``whatif.options``: the command's options, the policies it runs, checked before anything starts;
- ``whatif.timeline``: the planned fault timeline (a pure function of seed, mix, nodes, duration);
- ``whatif.runner``: one Temporal dev server, then per policy a fresh fleet, worker and watcher
  (``demo.stack``), sampled while it runs and summarized by ``demo.summary``;
- ``whatif.results``: the per-policy rows, the table and the JSON;
- ``whatif.report``: the self-contained HTML report (``whatif.charts``: matplotlib SVG inline).
"""
