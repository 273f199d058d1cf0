"""Sinusoidal, relative (T5) and ALiBi positions against their formulas and
transformers' T5 reference."""

import torch

from archlab.nn.positions.biases import ALiBi, RelativePositionBias, alibi_slopes, relative_bucket


def test_relative_buckets_match_transformers_t5():
    from transformers.models.t5.modeling_t5 import T5Attention

    q = torch.arange(300)[:, None]
    k = torch.arange(300)[None, :]
    ours = relative_bucket(q - k, num_buckets=32, max_distance=128)
    theirs = T5Attention._relative_position_bucket(
        k - q, bidirectional=False, num_buckets=32, max_distance=128
    )
    assert torch.equal(ours, theirs)


def test_relative_bias_is_shared_per_distance():
    rb = RelativePositionBias(n_heads=3)
    d = torch.arange(6)[:, None] - torch.arange(6)[None, :]
    bias = rb(d)  # (1, H, T, S)
    assert bias.shape == (1, 3, 6, 6)
    torch.testing.assert_close(bias[0, :, 4, 1], bias[0, :, 5, 2])  # same distance, same bias
    torch.testing.assert_close(bias[0, :, 0, 0], rb.weight[0])


def test_alibi_slopes_and_bias():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** (-i) for i in range(1, 9)]))
    s6 = alibi_slopes(6)  # non power of two: 4 geometric slopes, then every other of the 8-head set
    torch.testing.assert_close(s6, torch.tensor([2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]))
    d = torch.arange(5)[:, None] - torch.arange(5)[None, :]
    bias = ALiBi(8)(d)
    torch.testing.assert_close(bias[0, 2, 4, 1], torch.tensor(-3 * 2.0**-3))
