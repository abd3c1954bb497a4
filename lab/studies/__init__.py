"""The lab's stand-alone drivers (formerly ``scripts/``), each a ``main(argv)`` that
``python -m lab NAME`` calls with the rest of the command line (see :mod:`lab.cli`)."""
