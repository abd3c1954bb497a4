"""The training engine: the one training step, the gossip optimizer's shell with its
timings, rules and mixer, the parameter server, checkpoints, membership changes, and the
run loop. It receives a Communicator and never imports mpi4py."""
