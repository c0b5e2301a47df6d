"""Parsers of what NVIDIA's tools print, one module per tool.

Pure functions, no I/O: whoever runs the command (the activities over SSM or
a node Job, the node agent) hands the captured stdout, stderr and exit code
here and gets the activity contract back (``DiagnosticResult``,
``ResetGpusResult``) with failures as ``DcgmEvidence``, so the workflow
classifies them like any other signal. The package imports neither Temporal
nor Kubernetes (tests/agent/test_import_contract.py).

Modules: ``dcgm_diag`` (``dcgmi diag -j``), ``dcgm_health`` (``dcgmi health -c
-j``), ``gpu_reset`` (``nvidia-smi -r``), ``common`` (shared limits, JSON
extraction, ``combine``).
"""
