"""Mid-token continuation accuracy against a model with known truth: a bigram model built by hand
that predicts each byte's successor in a cyclic text, exactly (accuracy 1) or with one wrong
successor (the hits then follow from the text alone), and the cuts' rules (boundaries, seed, the
same offsets for every call)."""

from __future__ import annotations

import pytest
import torch

from archlab.data.tokenizer import build_tokenizer
from archlab.eval.continuation import continuation_accuracy, continuation_table, cut_offsets
from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM

CYCLE = "abcdefghij"
TEXT = CYCLE * 60


def successor_model(wrong: str | None = None) -> TransformerLM:
    """Blocks zeroed, one-hot byte embeddings, and a head that maps byte c to the next byte of CYCLE
    (byte `wrong` to 'x' instead): greedy decoding walks the cycle."""
    model = TransformerLM(
        ModelConfig(vocab_size=256, d_model=256, n_layers=1, n_heads=4, max_seq_len=128)
    ).eval()
    with torch.no_grad():
        model.layers[0].attn.o_proj.weight.zero_()
        model.layers[0].mlp.down_proj.weight.zero_()
        model.embed_tokens.weight.copy_(torch.eye(256))
        model.lm_head.weight.zero_()
        for i, c in enumerate(CYCLE):
            nxt = "x" if c == wrong else CYCLE[(i + 1) % len(CYCLE)]
            model.lm_head.weight[ord(nxt), ord(c)] = 1.0
    return model


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("byte", 256, None)


def test_a_model_that_knows_the_text_continues_every_cut(tok) -> None:
    got = continuation_accuracy(successor_model(), tok, TEXT, cuts=40, context=16, k=6)
    assert got.accuracy == 1.0 and len(got.hits) == 40 and got.ci[0] > 0.9


def test_hits_follow_from_the_text_when_one_successor_is_wrong(tok) -> None:
    k = 4
    got = continuation_accuracy(successor_model(wrong="e"), tok, TEXT, cuts=60, context=16, k=k)
    data = TEXT.encode()
    # a cut is continued right iff the walk from its last prompt byte through k - 1 true
    # bytes avoids 'e'
    want = [b"e" not in data[o - 1 : o + k - 1] for o in got.offsets]
    assert got.hits == want and 0 < got.accuracy < 1
    lo, hi = got.ci
    assert lo < got.accuracy < hi


def test_healing_is_scored_on_the_same_cuts_and_changes_nothing_for_bytes(tok) -> None:
    table = continuation_table(
        successor_model(wrong="e"), tok, TEXT, healings=(0, 1), cuts=30, context=16, k=4
    )
    # one byte per token: no cut is
    assert table[0].offsets == table[1].offsets and table[0].hits == table[1].hits
    # mid-token, and healing re-spells the removed byte exactly


def test_cuts_land_on_character_boundaries_and_are_reproducible() -> None:
    text = ("na\u00efve caf\u00e9 \u592a\u9633\u80fd " * 40).encode()
    offsets = cut_offsets(text, 50, 8, 4)
    assert offsets == cut_offsets(text, 50, 8, 4) and len(set(offsets)) == 50
    assert all(not 0x80 <= text[o] < 0xC0 for o in offsets)
    assert cut_offsets(text, 50, 8, 4, seed=1) != offsets
    with pytest.raises(ValueError, match="fewer than 500 cuts"):
        cut_offsets(text[:300], 500, 8, 4)


def test_cli_scores_a_checkpoint_with_and_without_healing(tmp_path, capsys) -> None:
    """`archlab eval continuation` on a checkpoint: the table of `continuation_table` on the same
    text (a known model: the successor walk with 'e' wrong), and a CSV of every cut; bad numbers
    fail in one line first."""
    from archlab.checkpoint import save_checkpoint, tied_aliases
    from archlab.cli import main

    model = successor_model(wrong="e")
    tok = build_tokenizer("byte", 256, None)
    config = {"model": model.config.to_dict(), "train": {}}
    run = save_checkpoint(
        tmp_path / "run",
        1,
        model.state_dict(),
        {},
        {"step": 1},
        config,
        tok.save(tmp_path / "tok"),
        tied_aliases(model),
    )
    text = tmp_path / "held_out.txt"
    text.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "eval"
    argv = [
        "eval",
        "continuation",
        "--checkpoint",
        str(run),
        "--data",
        str(text),
        "--cuts",
        "30",
        "--context",
        "16",
        "--k",
        "4",
        "--healing",
        "0,1",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    want = continuation_table(
        successor_model(wrong="e"), tok, TEXT, healings=(0, 1), cuts=30, context=16, k=4
    )
    assert (
        f"| none | {want[0].accuracy:.3f} |" in printed
        and f"| 1 token | {want[1].accuracy:.3f} |" in printed
    )
    assert (out / "continuation.md").read_text().strip() in printed
    rows = (out / "continuation.csv").read_text().splitlines()
    assert rows[0] == "healing,offset,hit" and len(rows) == 1 + 2 * 30
    assert [int(r.split(",")[2]) for r in rows[1:31]] == [int(h) for h in want[0].hits]
    for flags, message in (
        (["--healing", "0,-1"], "--healing '0,-1' is not allowed: comma-separated integers >= 0"),
        (["--cuts", "0"], "--cuts=0 is not allowed: an integer >= 1"),
    ):
        assert (
            main(["eval", "continuation", "--checkpoint", str(tmp_path / "missing"), *flags]) == 2
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0]
