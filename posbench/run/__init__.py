"""posbench.run: suites -> a plan -> worker processes -> rows in a run folder (``posbench.store``).

``suite/`` (files to ``Suite``), ``schedule`` (the ``Plan``), ``units``/``pool``/``slurm``/``ranks``
(where jobs run), ``launch``/``worker``/``isolated`` (processes), ``runner`` (``run_suite``).
"""
