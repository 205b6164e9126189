#!/usr/bin/env python
"""Entry point: ``python bench.py --suite efficiency`` (see ``python bench.py --help``)."""

import sys

from posbench.cli.app import main

if __name__ == "__main__":
    sys.exit(main())
