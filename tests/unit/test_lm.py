"""The language-model task without communication: byte tokens and their windows, the fixed
split, the embedded corpus's pin, the GPT's shapes, perplexity arithmetic, and the options
that refuse what cannot work."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from gossipgrad.data import corpus
from gossipgrad.data.sources import TextSource, open_source
from gossipgrad.data.text import VALIDATION, read_files, text_data, windows
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.engine.run.tasks import Classification, LanguageModel, perplexity, task_of
from gossipgrad.gpt import GPT, check_shape
from gossipgrad.models import build_model, loss_fn
from gossipgrad.options import DataOptions

torch.set_num_threads(1)


def test_windows_start_every_context_bytes_and_every_byte_is_a_target_once():
    stream = np.frombuffer(bytes(range(23)), dtype=np.uint8)
    w = windows(stream, 5)
    assert w.shape == (4, 6)  # (23 - 1) // 5
    assert w[:, 0].tolist() == [0, 5, 10, 15]
    targets = np.concatenate([row[1:] for row in w])
    assert targets.tolist() == list(range(1, 21))  # each once, in order
    assert windows(stream[:5], 5).shape == (0, 6)  # too short for one window


def test_the_split_keeps_the_end_of_every_file_for_validation():
    files = [("a", bytes(range(100))), ("b", bytes(range(100, 150)))]
    data = text_data(files, context=4)
    # validation: the last 10 bytes of a, then the last 5 of b, joined
    val = b"".join(d[len(d) - int(len(d) * VALIDATION) :] for _, d in files)
    assert val == bytes(range(90, 100)) + bytes(range(145, 150))
    got = np.concatenate([data.test_x[0].numpy(), *(w[1:] for w in data.test_x[1:].numpy())])
    assert bytes(got.tolist()) == val[: len(got)] and len(got) == 13  # 3 windows of 4 + 1
    # training: a's first 90 bytes, then b's first 45; labels are the file a window starts in
    train = bytes(range(90)) + bytes(range(100, 145))
    assert bytes(data.train_x[0].tolist()) == train[:5]
    starts = np.arange(len(data.train_x)) * 4
    assert data.train_y.tolist() == (starts >= 90).astype(int).tolist()
    assert data.classes == 256 and data.train_x.dtype == torch.uint8


def test_the_split_is_the_same_every_time_and_refuses_too_little_text():
    files = [("a", b"hello, world. " * 20)]
    one, two = text_data(files, 8), text_data(files, 8)
    assert torch.equal(one.train_x, two.train_x) and torch.equal(one.test_x, two.test_x)
    with pytest.raises(ValueError, match="validation split holds 2 bytes.*lower --context"):
        text_data([("a", b"x" * 20)], 8)


def test_a_folder_is_read_in_path_order_without_hidden_files(tmp_path: Path):
    (tmp_path / "b.txt").write_bytes(b"second")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "z.txt").write_bytes(b"first")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_bytes(b"hidden")
    (tmp_path / ".hidden.txt").write_bytes(b"hidden")
    files = read_files(f"text:{tmp_path}")
    assert files == [("a/z.txt", b"first"), ("b.txt", b"second")]
    with pytest.raises(ValueError, match="no such file or folder"):
        read_files(f"text:{tmp_path / 'missing'}")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no text there"):
        read_files(f"text:{empty}")


def test_the_embedded_corpus_matches_its_pin_here():
    files = corpus.read_corpus()
    assert [name for name, _ in files] == [path for _, _, path in corpus.PINS]
    assert sum(len(b) for _, b in files) == 611_114


def test_a_corpus_that_differs_from_the_pin_is_refused_naming_the_files(tmp_path: Path):
    root = tmp_path / "Lib"
    for _, _, path in corpus.PINS:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(corpus.stdlib_dir()) / path, root / path)
    assert corpus.mismatches(str(root)) == []
    first, second = corpus.PINS[0][2], corpus.PINS[1][2]
    (root / first).write_bytes((root / first).read_bytes() + b"# edited\n")
    (root / second).unlink()
    wrong = corpus.mismatches(str(root))
    assert len(wrong) == 2 and wrong[0].startswith(f"{first}: ") and "content differs" in wrong[0]
    assert wrong[1].startswith(f"{second}: ")
    with pytest.raises(ValueError) as err:
        corpus.read_corpus(str(root))
    message = str(err.value)
    assert "2 of them differ" in message and first in message and second in message
    assert str(root) in message and "--dataset text:PATH" in message and "\n" not in message


def test_the_text_source_splits_windows_into_tokens_and_their_successors(tmp_path: Path):
    path = tmp_path / "t.txt"
    path.write_bytes(bytes(range(256)) * 8)
    opts = DataOptions(dataset=f"text:{path}", context=16, batch_size=4)
    source = open_source(opts, rank=1, size=2, seed=3)
    assert isinstance(source, TextSource) and source.in_shape == (16,)
    assert source.classes == 256 and task_of(source).per_sample == 16
    x, y = next(source.train_batches(0))
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])  # y is x shifted by one
    assert torch.equal((x + 1) % 256, y)  # this text counts up
    vx, vy = next(source.eval_batches())
    assert torch.equal((vx + 1) % 256, vy)
    assert source.facts["text bytes"] == 2048 and len(source.facts["text sha256"]) == 16


def test_gpt_shapes_and_defaults():
    net = build_model("gpt", (12,), 256, hidden=24, layers=3, heads=2)
    assert isinstance(net, GPT) and len(net.blocks) == 3 and net.tokens.weight.shape == (256, 24)
    out = net(torch.randint(0, 256, (5, 12)))
    assert out.shape == (5, 12, 256)
    assert net(torch.randint(0, 256, (2, 7))).shape == (2, 7, 256)  # shorter is fine
    with pytest.raises(ValueError, match="13 tokens is longer than gpt's context 12"):
        net(torch.zeros(1, 13, dtype=torch.long))
    default = build_model("gpt", (128,), 256)
    assert len(default.blocks) == 4 and default.blocks[0].heads == 4
    assert default.tokens.weight.shape[1] == 128
    with pytest.raises(ValueError, match="width 100 .* multiple of its 3 heads"):
        check_shape(100, 0, 3, 0)


def test_the_gpt_is_causal():
    torch.manual_seed(0)
    net = build_model("gpt", (10,), 256, hidden=16, layers=2, heads=2)
    x = torch.randint(0, 256, (1, 10))
    changed = x.clone()
    changed[0, 6:] = (changed[0, 6:] + 1) % 256
    a, b = net(x), net(changed)
    assert torch.allclose(a[0, :6], b[0, :6])  # the future does not leak back
    assert not torch.allclose(a[0, 6:], b[0, 6:])


def test_sequence_loss_is_the_mean_over_every_position():
    torch.manual_seed(1)
    out, y = torch.randn(3, 5, 7), torch.randint(0, 7, (3, 5))
    manual = -torch.log_softmax(out, -1).gather(-1, y[..., None]).mean()
    assert torch.allclose(loss_fn(out, y), manual)


def test_perplexity_arithmetic():
    assert perplexity(0.0) == 1.0 and perplexity(None) is None
    assert perplexity(math.log(256)) == pytest.approx(256.0)
    assert perplexity(800.0) == math.inf and math.isnan(perplexity(float("nan")))
    # a model that knows nothing: uniform logits, loss ln 256, perplexity 256
    task = LanguageModel(tokens=4)
    sums = np.array(task.eval_sums(torch.zeros(2, 4, 256), torch.randint(0, 256, (2, 4))))
    fields = task.eval_fields(sums)
    assert fields["val_tokens"] == 8 and fields["test_loss"] == pytest.approx(math.log(256))
    assert fields["test_perplexity"] == pytest.approx(256.0)
    # counts add over ranks: two halves give the whole
    a = task.eval_sums(torch.randn(1, 4, 256), torch.randint(0, 256, (1, 4)))
    b = task.eval_sums(torch.randn(3, 4, 256), torch.randint(0, 256, (3, 4)))
    whole = task.eval_fields(np.array(a) + np.array(b))
    assert whole["test_loss"] == pytest.approx((a[0] + b[0]) / 16)
    assert task.rate_fields(10.0, 4) == {"tokens_per_s": 40.0, "tokens_per_s_per_rank": 10.0}
    train = task.train_fields(loss_sum=2 * math.log(3), hits=0.0, n=2)
    assert train["train_perplexity"] == pytest.approx(3.0) and "train_accuracy" not in train


def test_a_classifier_still_reports_accuracy():
    task = Classification()
    out = torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0]])
    fields = task.eval_fields(np.array(task.eval_sums(out, torch.tensor([0, 0]))))
    assert fields["top1"] == 0.5 and fields["top5"] == 1.0 and fields["val_images"] == 2
    assert "test_perplexity" not in fields


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"arch": "gpt"}, "arch='gpt' trains on text"),
        ({"arch": "mlp", "dataset": "text"}, "dataset='text' is byte-level text"),
        ({"arch": "mlp", "layers": 2}, "layers=2 shapes a sequence model"),
        ({"arch": "cnn", "context": 64}, "context=64 shapes a sequence model"),
        ({"arch": "gpt", "dataset": "text", "hidden": 30, "heads": 4}, "width 30"),
        ({"arch": "gpt", "dataset": "text", "heads": -1}, "heads must be >= 0"),
        ({"arch": "gpt", "dataset": "text:"}, "needs a path"),
        ({"arch": "gpt", "dataset": "text", "synthetic": True}, "without --data or --synthetic"),
    ],
)
def test_options_refuse_what_cannot_train(flags: dict, message: str):
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_flags(**flags)


def test_gpt_options_reach_the_config():
    cfg = TrainConfig.from_flags(arch="gpt", dataset="text", layers=2, heads=2, context=32)
    assert (cfg.model.layers, cfg.model.heads, cfg.data.context) == (2, 2, 32)
    assert {"layers": 2, "heads": 2, "context": 32}.items() <= cfg.to_dict().items()
