"""Suite files, from YAML on disk to a validated ``Suite`` and its cases: ``yaml_reader`` (safe,
bounded reading), ``suite_errors`` (the one-line ``SuiteError``), ``loading`` (``load``,
``resolve``, ``parse_set``), ``method_options``, ``schema``. Callers use the names re-exported here.
"""

from posbench.run.suite.loading import (  # noqa: F401
    DEFAULT_PROFILE,
    PROFILE_FOR_DEVICE,
    SUITES_DIR,
    Loaded,
    Profile,
    Suite,
    SuiteFile,
    _parse,
    display_path,
    expand_methods,
    find,
    load,
    names,
    parse_set,
    resolve,
)
from posbench.run.suite.method_options import constructor_options  # noqa: F401
from posbench.run.suite.schema import schema  # noqa: F401
from posbench.run.suite.suite_errors import PLAIN_NAME, PLAIN_NAME_ALLOWED, SuiteError, check_name, describe, error_at, key_name  # noqa: F401
from posbench.run.suite.yaml_reader import (  # noqa: F401
    MAX_FILE_BYTES,
    MAX_INT_DIGITS,
    MAX_NODES,
    KeyLines,
    SuiteLoader,
    YamlProblem,
    bad_number,
    load_yaml,
)
