"""The lab: how gossipgrad validates its own claims. Not part of the installed package.

Run from the root of a checkout (``python -m`` finds ``lab`` in the current directory;
under ``mpiexec`` every rank starts there too)::

    python -m lab --help
    mpiexec -n 2 python -m lab plan-validate --arch mlp --hidden 1024 --out pv-2.json
    python -m lab project-imagenet

What lives here: held-out planner scoring and the in-step calibration runs
(``plan-validate``), the straggler, ps-lag and convergence studies, and the launch recorders
and sweeps whose figures the docs quote (``sweep``, ``failure``, ``soak``, ...). What a user
runs on a cluster to decide and to train (``gossipgrad train|schedule|profile|netfit|plan``
and ``gossipgrad bench exchange|overlap|strategies|tta|shuffle``) stays in ``gossipgrad``.

Layout: ``tools/plan/`` (pure: held-out prediction, scoring metrics, synthetic profiles),
``tools/bench/`` (collective functions that run a study and return its record), ``cli/`` (the
click commands), ``studies/`` (the former ``scripts/`` drivers, one ``main(argv)`` each),
``tests/`` (run by the main test command: ``setup.cfg`` testpaths), ``records/`` (every
launch record and its raw data, behind docs/benchmarks.md's figures). ``lab`` imports
``gossipgrad``; ``gossipgrad`` never imports ``lab`` (``tests/unit/test_layers.py``).
"""
