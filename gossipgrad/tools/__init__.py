"""The tools: what measures and plans, apart from the runtime that trains.

- :mod:`~gossipgrad.tools.plan`: the performance model and planner (``gossipgrad plan``);
- :mod:`~gossipgrad.tools.bench`: benchmarks that print JSON (``gossipgrad bench``);
- :mod:`~gossipgrad.tools.measure`: the planner's inputs (``gossipgrad profile``, ``netfit``);
- :mod:`~gossipgrad.tools.devices`: the stand-in accelerator (``--device standin:PROFILE``);
- :mod:`~gossipgrad.tools.cli`: those commands.

They import the runtime; the runtime never imports them (``tests/unit/test_layers.py``).
They reach the command line and ``--device`` through the plugin seam: the
``gossipgrad.plugins`` entry point ``tools`` (:mod:`gossipgrad.tools.plugin`).

    handle = gossipgrad.tools.devices.standin(model, "resnet50", dilate=10)
"""
