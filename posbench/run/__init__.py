"""posbench.run: suites -> cases -> worker processes -> rows in a run folder.

- ``suite/``: a suite file read, validated and expanded into ``CaseSpec``s;
- ``schedule``: which (case, round)s run, in which order, in which worker process (shards,
  interleaved rounds, paired-window groups, resume);
- ``launch``: a worker process started, watched and ended;
- ``worker``: what runs inside it (``python -m posbench.run.worker``): the typed ``Case``, the task;
- ``ranks``: the cases of a bench.py launched by torchrun, run in-process on its ranks;
- ``folder``: the run folder's files (rows, lock, env.json, temp folders), never opened through a link;
- ``isolated``: user code (method files) asked in a child process with a time limit;
- ``runner``: the run loop, ``run_suite(suite, RunOptions)``.
"""
