"""The run folder's one owner: the row schema and typed rows (``row``), bounded reading
(``bounds``), rows read and merged (``run_rows``), ``run.json``/``env.json`` (``meta``), durable
writing and locks (``writing``), a launched sweep's record and files (``launched_sweep``), file
name stems (``file_stems``).
"""
