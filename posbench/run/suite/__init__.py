"""Suite files, from YAML on disk to a validated ``Suite`` and its cases.

One module per concern:

- ``yaml_reader``: the YAML read as data (a safe loader: nothing in a file runs code), with key
  lines and caps on what a small file can cost;
- ``suite_errors``: the one-line ``SuiteError`` (``<file>:<line>: <key>: <problem>; allowed: ...``);
- ``loading``: ``load`` (parse and check a file in full), ``resolve`` (a profile and ``--set``
  applied: a ``Suite``), ``parse_set``, the ``SuiteFile`` model;
- ``method_options``: the options a method's constructor takes (for ``method_options``);
- ``schema``: the JSON Schema of suite files (``bench.py schema``).

The names callers use are re-exported here (``from posbench.run import suite as suitemod;
suitemod.load(...)``).
"""
from posbench.run.suite.loading import (DEFAULT_PROFILE, PROFILE_FOR_DEVICE, SUITES_DIR, Loaded, Profile,  # noqa: F401
                                        Suite, SuiteFile, _parse, display_path, expand_methods, find, load, names,
                                        parse_set, resolve)
from posbench.run.suite.method_options import constructor_options  # noqa: F401
from posbench.run.suite.schema import schema  # noqa: F401
from posbench.run.suite.suite_errors import (PLAIN_NAME, PLAIN_NAME_ALLOWED, SuiteError, check_name,  # noqa: F401
                                             describe, error_at, key_name)
from posbench.run.suite.yaml_reader import (MAX_FILE_BYTES, MAX_INT_DIGITS, MAX_NODES, KeyLines,  # noqa: F401
                                            SuiteLoader, YamlProblem, bad_number, load_yaml)
