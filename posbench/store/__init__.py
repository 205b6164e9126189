"""The run folder's one owner: the row schema and typed rows (``row``), bounded reading
(``bounds``), rows read and merged (``rows``), ``run.json``/``env.json`` (``meta``), durable
writing and locks (``writing``), a launched sweep's record (``launch_record``) and files
(``sweep``), file names (``names``).
"""
