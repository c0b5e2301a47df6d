"""Chaos for the demo: kill the system's own parts during a run, then check its promises.

``driver`` injects the faults, ``recorder`` and ``collect`` gather the ground
truth and the workflows' histories, ``invariants`` judges them, ``session``
ties the three to a running :class:`~demo.stack.DemoStack`.
"""
