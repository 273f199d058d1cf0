"""The Llama weight-name table: transformers' LlamaForCausalLM with our exported weights
gives our logits."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from archlab import ModelConfig, TransformerLM, build_preset
from archlab.interop.hf import hf_state_dict
from tests.conftest import randomize_


def test_exported_llama_matches_transformers_logits():
    c = ModelConfig(vocab_size=64, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=32)
    # norm gains away from 1, so a swapped norm shows
    ours = randomize_(TransformerLM(c), 0.2).eval()
    hf = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=c.vocab_size,
            hidden_size=c.d_model,
            intermediate_size=c.d_ff,
            num_hidden_layers=c.n_layers,
            num_attention_heads=c.n_heads,
            num_key_value_heads=c.n_kv_heads,
            head_dim=c.head_dim,
            max_position_embeddings=c.max_seq_len,
            rms_norm_eps=c.norm_eps,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": c.rope.theta},
            pad_token_id=0,
        )
    ).eval()
    hf.load_state_dict(hf_state_dict(ours, "llama"), strict=True)
    ids = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, ours(ids), rtol=1e-4, atol=1e-5)


def test_non_llama_shapes_are_refused():
    with pytest.raises(ValueError, match="not llama-shaped"):
        hf_state_dict(TransformerLM(build_preset("gpt2")), "llama")
