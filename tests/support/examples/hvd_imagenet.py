"""A Horovod training script with the structure of Horovod's
``pytorch_imagenet_resnet50.py`` (written here; small images and a small ResNet so that it
runs on CPUs in seconds): ImageFolder data split by ``DistributedSampler``, several
sub-batches per step (``backward_passes_per_step``), warm-up of the learning rate in the
param groups, metrics averaged by ``hvd.allreduce``, a checkpoint written by rank 0, and
resume: the epoch broadcast from rank 0, the checkpoint loaded on rank 0 only, then
parameters and optimizer state broadcast.

    mpiexec -n 4 python tests/support/examples/hvd_imagenet.py --train-dir D/train --val-dir D/val

The tests run it with its import line changed to ``import gossipgrad.torch as hvd``.
"""

import argparse
import math
import os

import horovod.torch as hvd
import torch
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed
from torchvision import datasets, models, transforms

parser = argparse.ArgumentParser(description="Horovod ImageNet-style example")
parser.add_argument("--train-dir", required=True)
parser.add_argument("--val-dir", required=True)
parser.add_argument("--checkpoint-format", default="./checkpoint-{epoch}.pth.tar")
parser.add_argument("--fp16-allreduce", action="store_true", default=False)
parser.add_argument("--batches-per-allreduce", type=int, default=2)
parser.add_argument("--use-adasum", action="store_true", default=False)
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0)
parser.add_argument("--batch-size", type=int, default=2)
parser.add_argument("--val-batch-size", type=int, default=4)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--base-lr", type=float, default=0.0125)
parser.add_argument("--warmup-epochs", type=float, default=1)
parser.add_argument("--momentum", type=float, default=0.9)
parser.add_argument("--wd", type=float, default=0.00005)
parser.add_argument("--seed", type=int, default=42)


def train(epoch):
    model.train()
    train_sampler.set_epoch(epoch)
    train_loss = Metric("train_loss")
    train_accuracy = Metric("train_accuracy")
    for batch_idx, (data, target) in enumerate(train_loader):
        adjust_learning_rate(epoch, batch_idx)
        optimizer.zero_grad()
        # Split data into sub-batches of size batch_size
        for i in range(0, len(data), args.batch_size):
            data_batch = data[i : i + args.batch_size]
            target_batch = target[i : i + args.batch_size]
            output = model(data_batch)
            train_accuracy.update(accuracy(output, target_batch))
            loss = F.cross_entropy(output, target_batch)
            train_loss.update(loss)
            # Average gradients among sub-batches
            loss.div_(math.ceil(float(len(data)) / args.batch_size))
            loss.backward()
        # Gradient is applied across all ranks
        optimizer.step()
    if hvd.rank() == 0:
        print(
            f"train epoch {epoch + 1}: loss {train_loss.avg.item():.4f} "
            f"accuracy {100.0 * train_accuracy.avg.item():.2f}"
        )


def validate(epoch):
    model.eval()
    val_loss = Metric("val_loss")
    val_accuracy = Metric("val_accuracy")
    with torch.no_grad():
        for data, target in val_loader:
            output = model(data)
            val_loss.update(F.cross_entropy(output, target))
            val_accuracy.update(accuracy(output, target))
    if hvd.rank() == 0:
        print(
            f"validate epoch {epoch + 1}: loss {val_loss.avg.item():.4f} "
            f"accuracy {100.0 * val_accuracy.avg.item():.2f}"
        )


# Horovod: scale the learning rate from base_lr to base_lr * hvd.size() during warm-up.
def adjust_learning_rate(epoch, batch_idx):
    if epoch < args.warmup_epochs:
        epoch += float(batch_idx + 1) / len(train_loader)
        lr_adj = 1.0 / hvd.size() * (epoch * (hvd.size() - 1) / args.warmup_epochs + 1)
    elif epoch < 30:
        lr_adj = 1.0
    else:
        lr_adj = 1e-1
    for param_group in optimizer.param_groups:
        param_group["lr"] = args.base_lr * hvd.size() * args.batches_per_allreduce * lr_adj


def accuracy(output, target):
    pred = output.max(1, keepdim=True)[1]
    return pred.eq(target.view_as(pred)).cpu().float().mean()


def save_checkpoint(epoch):
    if hvd.rank() == 0:
        filepath = args.checkpoint_format.format(epoch=epoch + 1)
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
        torch.save(state, filepath)


# Horovod: average metrics from distributed training.
class Metric:
    def __init__(self, name):
        self.name = name
        self.sum = torch.tensor(0.0)
        self.n = torch.tensor(0.0)

    def update(self, val):
        self.sum += hvd.allreduce(val.detach().cpu(), name=self.name)
        self.n += 1

    @property
    def avg(self):
        return self.sum / self.n


if __name__ == "__main__":
    args = parser.parse_args()
    allreduce_batch_size = args.batch_size * args.batches_per_allreduce
    hvd.init()
    torch.manual_seed(args.seed)
    # If set > 0, will resume training from a given checkpoint.
    resume_from_epoch = 0
    for try_epoch in range(args.epochs, 0, -1):
        if os.path.exists(args.checkpoint_format.format(epoch=try_epoch)):
            resume_from_epoch = try_epoch
            break
    # Horovod: broadcast resume_from_epoch from rank 0 (which will have checkpoints).
    resume_from_epoch = hvd.broadcast(
        torch.tensor(resume_from_epoch), root_rank=0, name="resume_from_epoch"
    ).item()
    torch.set_num_threads(1)
    transform = transforms.Compose([transforms.Resize(32), transforms.ToTensor()])
    train_dataset = datasets.ImageFolder(args.train_dir, transform=transform)
    # Horovod: use DistributedSampler to partition data among workers.
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank()
    )
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=allreduce_batch_size, sampler=train_sampler
    )
    val_dataset = datasets.ImageFolder(args.val_dir, transform=transform)
    val_sampler = torch.utils.data.distributed.DistributedSampler(
        val_dataset, num_replicas=hvd.size(), rank=hvd.rank()
    )
    val_loader = torch.utils.data.DataLoader(
        val_dataset, batch_size=args.val_batch_size, sampler=val_sampler
    )
    # Set up a standard ResNet (small here: CPU tests).
    model = models.resnet18(num_classes=len(train_dataset.classes))
    # For sum/average with gradient accumulation: scale the learning rate.
    lr_scaler = args.batches_per_allreduce * hvd.size() if not args.use_adasum else 1
    optimizer = optim.SGD(
        model.parameters(),
        lr=(args.base_lr * lr_scaler),
        momentum=args.momentum,
        weight_decay=args.wd,
    )
    # Horovod: (optional) compression algorithm.
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    # Horovod: wrap optimizer with DistributedOptimizer.
    optimizer = hvd.DistributedOptimizer(
        optimizer,
        named_parameters=model.named_parameters(),
        compression=compression,
        backward_passes_per_step=args.batches_per_allreduce,
        op=hvd.Adasum if args.use_adasum else hvd.Average,
        gradient_predivide_factor=args.gradient_predivide_factor,
    )
    # Restore from a previous checkpoint on the first worker, which broadcasts to the others.
    if resume_from_epoch > 0 and hvd.rank() == 0:
        filepath = args.checkpoint_format.format(epoch=resume_from_epoch)
        checkpoint = torch.load(filepath)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
    # Horovod: broadcast parameters & optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    for epoch in range(resume_from_epoch, args.epochs):
        train(epoch)
        validate(epoch)
        save_checkpoint(epoch)
    if hvd.rank() == 0:
        print(f"done at epoch {args.epochs}, resumed from {resume_from_epoch}")
