"""Engine adapters: library-backed strategies (horovod, ddp) with DistributedOptimizer's
interface. Import the one you need (each imports its library); see
:func:`gossipgrad.engine.factory.make_distributed`."""
