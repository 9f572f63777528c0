"""Exercise suites, one module per chapter (``chNN.py`` with a ``SUITES`` list)."""
