"""PREDICTED scaling of ResNet-50 and GoogLeNet, gossip vs ring allreduce, 16..1024 GPUs.

    python -m lab project-imagenet            # markdown to stdout
    python -m lab project-imagenet --png out/  # plus efficiency plots

Synthetic profiles, not measurements: parameter counts and FLOPs come from the published
architectures (layer tables below); per-GPU step times from published single-GPU
throughput on a P100 (sources in PER_GPU); the split forward:backward = 1:2 and the
optimizer time are assumptions. Replace with `gossipgrad profile` output when available.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gossipgrad.tools.plan import CommModel, best_by, plan, plot_png, recommend
from lab.plan.synthetic import Layer, synthetic_profile

SIZES = (16, 32, 64, 128, 256, 512, 1024)
BUCKET_MB = (1, 4, 25, 100)

# Per-GPU fp32 throughput on one NVIDIA Tesla P100 (images/s), with its source.
PER_GPU = {
    "resnet50": (
        219.0,
        64,
        (
            "TensorFlow tf_cnn_benchmarks, DGX-1 P100, 1 GPU, synthetic data, "
            "batch 64 (tensorflow.org/performance/benchmarks, May 2017)"
        ),
    ),
    "googlenet": (
        468.0,
        64,
        (
            "NV-Caffe GoogLeNet on 1 P100-PCIe, batch 128 (Dell EMC HPC "
            "Innovation Lab blog, 'Deep Learning Performance with P100 GPUs', Oct 2016); "
            "assumed unchanged at batch 64"
        ),
    ),
}
OPTIMIZER_S = {"resnet50": 0.003, "googlenet": 0.001}  # assumed: SGD-momentum update

NETWORKS = {
    "100 Gb/s InfiniBand (alpha 2 us, 12 GB/s)": CommModel(2e-6, 1 / 12e9),
    "10 GbE (alpha 30 us, 1.1 GB/s)": CommModel(30e-6, 1 / 1.1e9),
}


def conv(
    name: str, cin: int, cout: int, k: int, hw: int, *, bn: bool = True, bias: bool = False
) -> Layer:
    """A k x k convolution with ``hw x hw`` output; FLOPs counted as multiply-adds."""
    params = k * k * cin * cout + (2 * cout if bn else 0) + (cout if bias else 0)
    return Layer(name, params, float(k * k * cin * cout * hw * hw))


def resnet50() -> list[Layer]:
    """torchvision resnet50 (v1.5: stride on the 3x3), 25,557,032 parameters."""
    layers = [conv("conv1", 3, 64, 7, 112)]
    cin = 64
    for stage, (blocks, mid, hw) in enumerate(
        [(3, 64, 56), (4, 128, 28), (6, 256, 14), (3, 512, 7)]
    ):
        out = 4 * mid
        for b in range(blocks):
            hw_in = hw * 2 if (b == 0 and stage > 0) else hw
            name = f"layer{stage + 1}.{b}"
            layers.append(conv(f"{name}.conv1", cin, mid, 1, hw_in))
            layers.append(conv(f"{name}.conv2", mid, mid, 3, hw))
            layers.append(conv(f"{name}.conv3", mid, out, 1, hw))
            if b == 0:
                layers.append(conv(f"{name}.downsample", cin, out, 1, hw))
            cin = out
    layers.append(Layer("fc", 2048 * 1000 + 1000, 2048 * 1000.0))
    return layers


# GoogLeNet (Szegedy et al. 2015, Table 1): in, #1x1, #3x3red, #3x3, #5x5red, #5x5, pool, hw
INCEPTION = {
    "3a": (192, 64, 96, 128, 16, 32, 32, 28),
    "3b": (256, 128, 128, 192, 32, 96, 64, 28),
    "4a": (480, 192, 96, 208, 16, 48, 64, 14),
    "4b": (512, 160, 112, 224, 24, 64, 64, 14),
    "4c": (512, 128, 128, 256, 24, 64, 64, 14),
    "4d": (512, 112, 144, 288, 32, 64, 64, 14),
    "4e": (528, 256, 160, 320, 32, 128, 128, 14),
    "5a": (832, 256, 160, 320, 32, 128, 128, 7),
    "5b": (832, 384, 192, 384, 48, 128, 128, 7),
}


def googlenet() -> list[Layer]:
    """The paper's GoogLeNet without auxiliary classifiers (biases, no batch norm): ~7.0M
    parameters by this table (the paper quotes ~6.8M; torchvision's variant is 6.6M)."""
    layers = [
        conv("conv1", 3, 64, 7, 112, bn=False, bias=True),
        conv("conv2.reduce", 64, 64, 1, 56, bn=False, bias=True),
        conv("conv2", 64, 192, 3, 56, bn=False, bias=True),
    ]
    for name, (cin, n1, r3, n3, r5, n5, pool, hw) in INCEPTION.items():
        parts = [
            conv("", cin, n1, 1, hw, bn=False, bias=True),
            conv("", cin, r3, 1, hw, bn=False, bias=True),
            conv("", r3, n3, 3, hw, bn=False, bias=True),
            conv("", cin, r5, 1, hw, bn=False, bias=True),
            conv("", r5, n5, 5, hw, bn=False, bias=True),
            conv("", cin, pool, 1, hw, bn=False, bias=True),
        ]
        layers.append(
            Layer(f"inception{name}", sum(p.params for p in parts), sum(p.flops for p in parts))
        )
    layers.append(Layer("fc", 1024 * 1000 + 1000, 1024 * 1000.0))
    return layers


def profiles() -> dict:
    out = {}
    for model, layers in (("resnet50", resnet50()), ("googlenet", googlenet())):
        ips, batch, _ = PER_GPU[model]
        step = batch / ips
        opt = OPTIMIZER_S[model]
        out[model] = synthetic_profile(
            model,
            layers,
            batch_size=batch,
            device="P100 (synthetic)",
            forward_s=(step - opt) / 3,
            backward_s=2 * (step - opt) / 3,
            optimizer_s=opt,
        )
    return out


def _cell(row) -> str:
    return f"{row.efficiency:.2%} ({row.bucket_mb:g} MiB)"


def report(png_dir: Path | None = None) -> str:
    lines = [
        (
            "**PREDICTIONS from the model, not measurements.** Efficiency = T(1) / T(size) "
            "(per-GPU throughput relative to one GPU, no communication); best bucket cap of "
            f"{', '.join(map(str, BUCKET_MB))} MiB in parentheses; s0/s1 = staleness 0/1."
        ),
        "",
    ]
    for model, prof in profiles().items():
        ips, batch, source = PER_GPU[model]
        lines += [
            (
                f"### {model}: {prof.param_bytes / 1e6:.1f} MB of fp32 parameters "
                f"({prof.param_bytes // 4:,} params), {len(prof.buckets)} layer buckets"
            ),
            "",
            f"Per-GPU step: {batch} images in {prof.local_step_s:.4f} s ({ips:g} img/s, {source}).",
            "",
        ]
        for net_name, model_net in NETWORKS.items():
            rows = plan(prof, model_net, sizes=SIZES, bucket_mb=BUCKET_MB)
            rec = recommend(rows)
            cols = {
                (s, k): best_by(rows, {"strategy": s, "staleness": k})
                for s in ("gossip", "allreduce")
                for k in (0, 1)
            }
            lines += [
                f"#### {model} on {net_name}",
                "",
                (
                    "| GPUs | gossip s0 | gossip s1 | allreduce s0 | allreduce s1 "
                    "| recommended | images/s |"
                ),
                "|---|---|---|---|---|---|---|",
            ]
            for size in SIZES:
                r = rec[size]
                cells = " | ".join(_cell(cols[key][size]) for key in cols)
                lines.append(
                    f"| {size} | {cells} | {r.strategy} s{r.staleness} "
                    f"{r.bucket_mb:g} MiB | {r.samples_per_s:,.0f} |"
                )
            lines.append("")
            if png_dir is not None:
                tag = f"{model}_{net_name.split()[0].replace('/', '')}"
                plot_png(rows, png_dir / f"{tag}.png", title=f"{model}, {net_name} (PREDICTED)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m lab project-imagenet", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--png", type=Path, default=None, help="directory for efficiency plots")
    args = parser.parse_args(argv)
    if args.png is not None:
        args.png.mkdir(parents=True, exist_ok=True)
    print(report(args.png))


if __name__ == "__main__":
    main()
