"""Cluster files of CPU ranks shared by the Python test drivers
(test/runtime/*.py, test/zoo/zoo_check.py)."""

# Node a: one CPU at full speed; nodes b and c: slower CPUs. With pp=2 one
# stage gets two workers of different speed, so their shares differ.
CPU3 = """nodes:
  - name: a
    devices: [{type: CPU, count: 1}]
  - name: b
    devices: [{type: CPU, count: 1}]
    speed_factors: {CPU: 0.5}
  - name: c
    devices: [{type: CPU, count: 1}]
    speed_factors: {CPU: 0.25}
"""

CPU1 = """nodes:
  - name: a
    devices: [{type: CPU, count: 1}]
"""
