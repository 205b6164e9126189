"""Helpers shared by test files, imported as ``from tests.helpers.<module> import ...``.

A test file never imports another test file: what two files share lives here (plain functions and
constants) or in ``tests/conftest.py`` (fixtures). pytest's ``pythonpath = ["."]`` puts the
repository root on ``sys.path``, so ``tests`` resolves as a namespace package from any folder.
"""
