"""The individual checks: DCGM health, nvidia-smi, EFA. Each turns tool output into problems."""
