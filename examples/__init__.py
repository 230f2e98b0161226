"""The bundled example models and the script that builds them (not installed with hwgen).

Importable from the repository root (the tests import ``examples.build_models``); rebuild the
models with ``.venv/bin/python -m examples.build_models``.
"""
