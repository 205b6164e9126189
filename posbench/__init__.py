"""posbench: measure what a positional-encoding method costs and how well it extrapolates.

Its packages (core, attention, data, engine, store, triton_kernels, hf, report, tasks, run, cli),
what each holds and what it may import: docs/architecture.md.
"""

__version__ = "0.1.0"
