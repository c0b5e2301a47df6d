"""``remediate demo``: the whole remediation system on a simulated GPU fleet.

``run`` orchestrates (Temporal dev server with the UI, ``stack``: fleet
simulator, worker process and node-condition watcher), ``policy`` scales the
policy to the simulator's time factor, ``incidents`` reads the incidents back
from Temporal, ``progress`` draws them live and ``summary`` sums them up.
``server`` (the dev server launcher) is shared with the benchmarks and the
end-to-end tests (``tests/e2e``), which also use ``stack``.
"""
