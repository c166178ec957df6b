"""The GPT decoder and its synthetic data: causal, sized as configured, and the stream has a
pattern a model can learn (so a falling loss means training works)."""

from __future__ import annotations

import math

import pytest
import torch
from smoke_helpers import one_rank_group  # also: one torch thread

from validators.model import GPT, PRESETS, config, params_for_flops, synthetic_batch
from validators.train import Faults, train

CPU = torch.device("cpu")


def test_config_overrides_and_rejects_impossible_shapes():
    cfg = config("tiny", layers=3, d_model=None)
    assert cfg.layers == 3 and cfg.d_model == PRESETS["tiny"].d_model
    with pytest.raises(ValueError, match="not a multiple of heads"):
        config("tiny", d_model=66)
    with pytest.raises(ValueError, match="data_vocab 128 must be between 2 and vocab 64"):
        config("tiny", vocab=64)
    with pytest.raises(ValueError, match="unknown model preset 'huge'"):
        config("huge")


def test_default_preset_is_a_few_hundred_million_parameters():
    # Counted from the shapes, without allocating the model.
    c = PRESETS["default"]
    per_block = 12 * c.d_model**2 + 4 * c.d_model  # qkv, proj, fc, out + two LayerNorms
    total = c.layers * per_block + c.vocab * c.d_model + 2 * c.d_model
    assert 200e6 < total < 600e6
    tiny = GPT(PRESETS["tiny"])
    n = sum(p.numel() for p in tiny.parameters())
    assert params_for_flops(tiny) == n - tiny.pos.weight.numel()


def test_attention_is_causal():
    torch.manual_seed(0)
    cfg = config("tiny")
    model = GPT(cfg).eval()
    idx = torch.randint(0, cfg.vocab, (2, cfg.seq_len))
    changed = idx.clone()
    changed[:, 40:] = (changed[:, 40:] + 1) % cfg.vocab
    with torch.no_grad():
        a, b = model.logits(idx), model.logits(changed)
    assert torch.equal(a[:, :40], b[:, :40])
    assert not torch.allclose(a[:, 40:], b[:, 40:])


def test_synthetic_stream_is_a_fixed_cycle():
    cfg = config("tiny", data_vocab=100)
    succ: dict[int, int] = {}
    for rank in range(2):
        for step in range(3):
            x, y = synthetic_batch(cfg, step, rank, seed=7, device=CPU)
            assert x.shape == y.shape == (cfg.batch, cfg.seq_len)
            assert torch.equal(x[:, 1:], y[:, :-1])
            assert int(x.max()) < 100
            for a, b in zip(x.flatten().tolist(), y.flatten().tolist(), strict=True):
                assert succ.setdefault(a, b) == b  # one successor per token, everywhere
    x0, _ = synthetic_batch(cfg, 0, 0, 7, CPU)
    x1, _ = synthetic_batch(cfg, 0, 1, 7, CPU)
    assert not torch.equal(x0, x1)  # ranks see different batches
    assert torch.equal(x0, synthetic_batch(cfg, 0, 0, 7, CPU)[0])  # and reproducible ones


def test_tiny_model_learns_the_stream():
    torch.manual_seed(0)
    cfg = config("tiny")
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(25):
        loss = model(*synthetic_batch(cfg, step, 0, 0, CPU))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert abs(losses[0] - math.log(cfg.vocab)) < 0.5  # starts near chance
    assert losses[-1] < 0.6 * losses[0]


class _NormRecorder(torch.optim.AdamW):
    """AdamW that records the total gradient norm it is handed at every step."""

    norms: list[float]

    def step(self, closure=None):
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        self.norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
        return super().step(closure)


@pytest.mark.parametrize("clip", [0.0, 0.05])
def test_training_loop_clips_the_gradient_norm(clip):
    """The loop clips before the optimizer steps (without it the 390M preset's loss spikes and
    stalls at ln(data_vocab) on an H100: README, Figures)."""
    cfg = config("tiny")
    torch.manual_seed(0)
    model = GPT(cfg)
    opt = _NormRecorder(model.parameters(), lr=1e-3)
    opt.norms = []
    with one_rank_group():
        res = train(model, opt, cfg, CPU, 4, 1, 0, 1e-3, Faults(), lambda s: None, grad_clip=clip)
    assert len(res.losses) == 4 and len(opt.norms) == 4
    if clip:
        assert max(opt.norms) <= clip * 1.001
    else:
        assert min(opt.norms) > 0.05  # unclipped norms of this model are far above the clip
