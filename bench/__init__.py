"""corvid-actors benchmarks: each figure is a ratio or distribution measured side by side.

Run them all with ``python -m bench`` (or ``python bench/run.py``): every benchmark runs
in its own subprocess (clean RSS and thread counts), and the results are written to
``bench/RESULTS.md`` with the machine, the date, the load average next to each figure and
the command that reproduces it. ``python -m bench.<name>`` runs one and prints JSON.
Benchmarks are not part of the test run.
"""
