"""Token healing (kexue.fm/archives/9762): the prefix property, the exact constrained distribution
with a fixed-logit model, Su's two-token "import numpy" case, a clean boundary left alone, rows
of a batch backing off different amounts, the byte trie against brute force, ByteLevel bytes, and
the CLI flag."""

from __future__ import annotations

import pytest
import torch
from scipy import stats
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers

from archlab.cli import main
from archlab.data.tokenizer import Tokenizer, bytes_to_unicode, train_bpe
from archlab.infer.generate import generate, generate_text, text_generation
from archlab.infer.healing import ByteTrie, back_off
from archlab.infer.sampling import SamplingConfig
from tests.infer.conftest import tiny

# tokens built by merges
MERGED = [" as np", "import", " numpy", " numpy as np", "import numpy as np"]


def numpy_tokenizer() -> Tokenizer:
    """A byte-level BPE whose only merges spell MERGED: "import numpy" encodes as ["import", "
    numpy"], while "import numpy as np" is one token (Su's example)."""
    char = bytes_to_unicode()
    spell = lambda text: "".join(char[b] for b in text.encode())  # noqa: E731
    vocab = {c: b for b, c in char.items()}
    merges = []

    def add(left: str, right: str) -> None:
        merges.append((left, right))
        vocab.setdefault(left + right, len(vocab))

    for word in MERGED[:3]:  # prefix by prefix: i+m, im+p, ...
        w = spell(word)
        for i in range(1, len(w)):
            add(w[:i], w[i])
    add(spell(" numpy"), spell(" as np"))
    add(spell("import"), spell(" numpy as np"))
    inner = HFTokenizer(models.BPE(vocab=vocab, merges=merges))
    inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    inner.decoder = decoders.ByteLevel()
    return Tokenizer(inner)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return numpy_tokenizer()


def fixed_logits(vocab_size: int, logits: torch.Tensor) -> torch.nn.Module:
    """A model whose every next-token logit vector is `logits`: zero head weights plus that bias."""
    model = tiny(vocab_size=vocab_size, lm_head_bias=True, max_seq_len=64)
    with torch.no_grad():
        model.lm_head.weight.zero_()
        model.lm_head.bias.copy_(logits)
    return model


def ids_of(tok: Tokenizer, *texts: str) -> list[int]:
    return [
        tok.inner.token_to_id("".join(bytes_to_unicode()[b] for b in t.encode())) for t in texts
    ]


def test_token_bytes_map_bytelevel_characters_back_to_raw_bytes(tok: Tokenizer) -> None:
    table = tok.token_bytes()
    assert [table[i] for i in ids_of(tok, " numpy", "import numpy as np")] == [
        b" numpy",
        b"import numpy as np",
    ]
    assert table[ord("\n")] == b"\n" and all(table[b] == bytes([b]) for b in range(256))
    text = "na\u00efve caf\u00e9 \u592a\u9633\u80fd\n"
    bpe = train_bpe([text] * 50, 300)
    table = bpe.token_bytes()
    assert table[bpe.eos_id] is None  # special tokens have no bytes
    # tokens split characters
    assert any(len(b) > 1 and not b.decode("utf-8", "ignore") for b in table if b)
    # the bytes of a tokenisation spell the text
    for sample in (text, "caf\u00e9\u80fd na", "\u9633 x"):
        assert b"".join(table[i] for i in bpe.encode(sample)) == sample.encode()


def test_trie_matches_brute_force(tok: Tokenizer) -> None:
    table = tok.token_bytes()
    trie = ByteTrie(table)
    for rest, cuts in [
        (b" numpy", []),
        (b"import numpy", [6]),
        (b"imp", []),
        (b"import numpy as", [6, 12]),
    ]:
        got, consumed = trie.allowed(rest, cuts)
        want = {
            i
            for i, b in enumerate(table)
            if b and (b.startswith(rest) or (len(b) in cuts and rest.startswith(b)))
        }
        assert set(got) == want
        assert all(consumed[i] == min(len(table[i]), len(rest)) for i in got)


PROMPTS = ["import numpy", "import num", "x = 1; import", "caf\u00e9 \u592a", "a"]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_healed_text_starts_with_the_prompt_byte_for_byte(tok: Tokenizer, n: int) -> None:
    model = tiny(vocab_size=tok.vocab_size, max_seq_len=64)
    sampling = SamplingConfig(max_new_tokens=6, temperature=1.0, seed=3)
    result = generate_text(model, tok, PROMPTS, sampling, token_healing=n)
    ids = [tok.encode(p) for p in PROMPTS]
    for prompt, prompt_ids, text, new, k in zip(
        PROMPTS, ids, result.texts, result.tokens, result.backed_off
    ):
        full = b"".join(tok.token_bytes()[t] for t in prompt_ids[: len(prompt_ids) - k] + new)
        assert full.startswith(prompt.encode())
        assert full.decode("utf-8", "replace") == prompt + text
    assert result.backed_off[-1] == 0  # a one-token prompt keeps its token


def test_healed_first_step_is_the_renormalised_softmax_over_consistent_tokens(
    tok: Tokenizer,
) -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(tok.vocab_size, generator=gen)
    # the tokens whose bytes start with the removed " numpy"
    allowed = ids_of(tok, " numpy", " numpy as np")
    logits[ord("q")] = 10.0  # the unconstrained favourite is outside the set
    model = fixed_logits(tok.vocab_size, logits)
    prompt = tok.encode("import numpy")
    rows = 3000
    out = generate(
        model,
        [prompt] * rows,
        SamplingConfig(max_new_tokens=1, temperature=1.0, seed=1),
        token_healing=1,
        token_bytes=tok.token_bytes(),
    )
    firsts = [t[0] for t in out.tokens]
    assert set(firsts) <= set(allowed) and out.backed_off == [1] * rows
    want = torch.softmax(logits[allowed].double(), 0).tolist()
    counts = [firsts.count(i) for i in allowed]
    # a false alarm 1 in 10^4
    assert stats.chisquare(counts, [p * rows for p in want]).pvalue > 1e-4
    greedy = generate(
        model,
        [prompt],
        SamplingConfig(max_new_tokens=1, temperature=0),
        token_healing=1,
        token_bytes=tok.token_bytes(),
    )
    assert greedy.tokens[0][0] == max(allowed, key=lambda i: float(logits[i]))


def test_two_token_backoff_reaches_the_merged_token(tok: Tokenizer) -> None:
    logits = torch.zeros(tok.vocab_size)
    merged, tail = ids_of(tok, "import numpy as np", " numpy as np")
    logits[merged], logits[tail] = 5.0, 1.0
    model = fixed_logits(tok.vocab_size, logits)
    prompt = "\nimport numpy"  # one token must stay for the prefill
    assert tok.encode(prompt) == [ord("\n"), *ids_of(tok, "import", " numpy")]
    greedy = SamplingConfig(max_new_tokens=1, temperature=0)
    two = generate_text(model, tok, [prompt], greedy, token_healing=2)
    assert two.backed_off == [2] and two.tokens[0] == [merged] and two.texts[0] == " as np"
    # must start with " numpy": not the merge
    one = generate_text(model, tok, [prompt], greedy, token_healing=1)
    assert one.tokens[0] == [tail] and one.texts[0] == " as np"
    plain = generate_text(model, tok, [prompt], greedy)
    # unhealed, the favourite repeats "import numpy" after the prompt
    assert plain.texts[0] == "import numpy as np"


def test_clean_boundary_with_nothing_longer_is_unchanged(tok: Tokenizer) -> None:
    model = tiny(vocab_size=tok.vocab_size, max_seq_len=64)
    prompt = "x as np"  # ends on the token " as np", which no longer token extends
    assert tok.encode(prompt)[-1] == ids_of(tok, " as np")[0]
    greedy = SamplingConfig(max_new_tokens=8, temperature=0)
    healed = generate_text(model, tok, [prompt], greedy, token_healing=1)
    plain = generate_text(model, tok, [prompt], SamplingConfig(max_new_tokens=7, temperature=0))
    assert healed.tokens[0] == ids_of(tok, " as np") + plain.tokens[0]
    assert healed.texts == plain.texts


def test_batched_rows_back_off_their_own_amounts_as_they_would_alone(tok: Tokenizer) -> None:
    model = tiny(vocab_size=tok.vocab_size, max_seq_len=64)
    prompts = ["import numpy", "b", "x = import num", "caf\u00e9"]
    sampling = SamplingConfig(max_new_tokens=5, temperature=0)
    batch = generate_text(model, tok, prompts, sampling, token_healing=2)
    assert len(set(batch.backed_off)) > 1
    for i, prompt in enumerate(prompts):
        alone = generate_text(model, tok, [prompt], sampling, token_healing=2)
        assert (alone.tokens[0], alone.texts[0], alone.backed_off[0]) == (
            batch.tokens[i],
            batch.texts[i],
            batch.backed_off[i],
        )


def test_back_off_never_splits_a_character_and_keeps_one_token() -> None:
    table = [bytes([b]) for b in range(256)]
    ids = list("x\u00e9".encode())  # x, 0xC3, 0xA9
    assert back_off(ids, 1, table)[0] == 0  # removing 0xA9 alone would cut the character
    assert back_off(ids, 2, table)[:2] == (2, "\u00e9".encode())
    assert back_off([65], 3, table)[0] == 0


def test_bad_healing_arguments_are_one_line_errors(tok: Tokenizer) -> None:
    model = tiny(vocab_size=tok.vocab_size, max_seq_len=64)
    with pytest.raises(ValueError, match="token_healing needs token_bytes"):
        generate(model, [[1, 2]], SamplingConfig(max_new_tokens=2), token_healing=1)
    with pytest.raises(ValueError, match=r"token_healing=-1 is not allowed: an integer >= 0"):
        generate(
            model,
            [[1, 2]],
            SamplingConfig(max_new_tokens=2),
            token_healing=-1,
            token_bytes=tok.token_bytes(),
        )


def test_cli_token_healing_defaults_to_one_token(monkeypatch, capsys, tok: Tokenizer) -> None:
    model = tiny(vocab_size=tok.vocab_size, max_seq_len=64)
    monkeypatch.setattr("archlab.interop.model_folder.open_model", lambda path: (model, tok))
    seen = []
    real = text_generation  # the command imports it from archlab.infer.generate when it runs
    monkeypatch.setattr(
        "archlab.infer.generate.text_generation",
        lambda *a, **k: seen.append(k["token_healing"]) or real(*a, **k),
    )
    argv = [
        "generate",
        "--checkpoint",
        "c",
        "--prompt",
        "import num",
        "--max-new-tokens",
        "3",
        "--temperature",
        "0",
    ]
    for extra, want in (([], 0), (["--token-healing"], 1), (["--token-healing", "2"], 2)):
        assert main([*argv, *extra]) == 0
        assert capsys.readouterr().out.startswith("import num") and seen[-1] == want
    assert main([*argv, "--token-healing", "-1"]) == 2
    assert "--token-healing=-1 is not allowed" in capsys.readouterr().err
