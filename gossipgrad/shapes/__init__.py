"""The built-in exchange shapes, one module each, registered in
:data:`gossipgrad.registry.SHAPES` (the interface: :class:`gossipgrad.specs.ShapeSpec`):

- ``peer`` (:mod:`.peer`): one send to this step's peer (gossip);
- ``ring`` (:mod:`.ring`): an allreduce (allreduce, allreduce-param, horovod, ddp);
- ``server`` (:mod:`.server`): a push to each bucket's owner and a pull back (ps);
- ``node`` (:mod:`.node`): a node's ranks averaged, one shard a rank between nodes
  (gossip-node);
- ``none`` (:mod:`.none`): nothing moves (local).

A new shape is one module: a ``ShapeSpec`` subclass registered with
``SHAPES.register(name, spec)`` and named by a strategy's ``shape``
(``tests/support/plugins/toy_pairs.py``).
"""

from gossipgrad.shapes import node, none, peer, ring, server  # noqa: F401 - registration
