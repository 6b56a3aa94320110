"""The ``kernelswarm`` command line (cli.py) and one module per command: each parses its
arguments, calls the library below it and prints. No other module of experiments/ imports
these (tests/test_layering.py)."""
