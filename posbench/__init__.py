"""posbench: measure what a positional-encoding method costs and how well it extrapolates."""

__version__ = "0.1.0"
