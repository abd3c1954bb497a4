"""A Horovod benchmark with the structure of Horovod's ``pytorch_synthetic_benchmark.py``
(written here; a small ResNet at 32x32 so that CPUs finish in seconds): a torchvision
model, synthetic data, ``hvd.DistributedOptimizer`` with compression and op, timed with
``timeit``; rank 0 prints images per second.

    mpiexec -n 2 python tests/support/examples/hvd_synthetic.py --num-iters 3

The tests run it with its import line changed to ``import gossipgrad.torch as hvd``.
"""

import argparse
import timeit

import horovod.torch as hvd
import numpy as np
import torch
import torch.nn.functional as F
import torch.optim as optim
from torchvision import models

parser = argparse.ArgumentParser(description="PyTorch synthetic benchmark")
parser.add_argument("--fp16-allreduce", action="store_true", default=False)
parser.add_argument("--model", type=str, default="resnet18")
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--image-size", type=int, default=32)
parser.add_argument("--num-warmup-batches", type=int, default=2)
parser.add_argument("--num-batches-per-iter", type=int, default=3)
parser.add_argument("--num-iters", type=int, default=3)
parser.add_argument("--use-adasum", action="store_true", default=False)
args = parser.parse_args()

hvd.init()
torch.set_num_threads(1)

# Set up standard model.
model = getattr(models, args.model)()
# By default, Adasum doesn't need scaling up learning rate.
lr_scaler = hvd.size() if not args.use_adasum else 1
optimizer = optim.SGD(model.parameters(), lr=0.01 * lr_scaler)
# Horovod: (optional) compression algorithm.
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
# Horovod: wrap optimizer with DistributedOptimizer.
optimizer = hvd.DistributedOptimizer(
    optimizer,
    named_parameters=model.named_parameters(),
    compression=compression,
    op=hvd.Adasum if args.use_adasum else hvd.Average,
)
# Horovod: broadcast parameters & optimizer state.
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

# Set up fixed fake data
data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
target = torch.LongTensor(args.batch_size).random_() % 1000


def benchmark_step():
    optimizer.zero_grad()
    output = model(data)
    loss = F.cross_entropy(output, target)
    loss.backward()
    optimizer.step()


def log(s, nl=True):
    if hvd.rank() != 0:
        return
    print(s, end="\n" if nl else "")


log(f"Model: {args.model}")
log(f"Batch size: {args.batch_size}")
log(f"Number of CPUs: {hvd.size()}")

# Warm-up
log("Running warmup...")
timeit.timeit(benchmark_step, number=args.num_warmup_batches)

# Benchmark
log("Running benchmark...")
img_secs = []
for x in range(args.num_iters):
    time = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
    img_sec = args.batch_size * args.num_batches_per_iter / time
    log(f"Iter #{x}: {img_sec:.1f} img/sec per CPU")
    img_secs.append(img_sec)

# Results
img_sec_mean = np.mean(img_secs)
img_sec_conf = 1.96 * np.std(img_secs)
log(f"Img/sec per CPU: {img_sec_mean:.1f} +-{img_sec_conf:.1f}")
total, conf = hvd.size() * img_sec_mean, hvd.size() * img_sec_conf
log(f"Total img/sec on {hvd.size()} CPU(s): {total:.1f} +-{conf:.1f}")
