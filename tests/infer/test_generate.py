"""generate.py and `archlab generate`: sampling distributions, seeds, batched left-padded
generation equal to each prompt alone, EOS / stop strings / max tokens, streaming text, the
context limit, O(1) Python work per decode step, and the CLI (prompt, file, stdin, interactive,
memory report, errors)."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest
import torch

from archlab import KVCache, RopeScaling, TransformerLM
from archlab.cli import main
from archlab.data.tokenizer import build_tokenizer
from archlab.infer.generate import check_context, generate, generate_text
from archlab.infer.memory import kv_bytes_table
from archlab.infer.sampling import SamplingConfig
from archlab.nn.positions.rerope import relative_positions
from tests.infer.conftest import tiny

GREEDY = SamplingConfig(max_new_tokens=12, temperature=0)


class EosTokenizer:
    """The byte tokenizer with a chosen EOS id."""

    def __init__(self, eos_id: int) -> None:
        self.inner, self.eos_id = build_tokenizer("byte", 256, None), eos_id

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def decode(self, ids: list[int]) -> str:
        return self.inner.decode(ids)


def test_same_seed_same_text(tokenizer) -> None:
    model = tiny()
    sampling = SamplingConfig(max_new_tokens=20, temperature=1.0, top_k=50, top_p=0.95, seed=7)
    first = generate_text(model, tokenizer, ["Once upon", "a"], sampling)
    again = generate_text(model, tokenizer, ["Once upon", "a"], sampling)
    other = generate_text(
        model, tokenizer, ["Once upon", "a"], SamplingConfig(**{**vars(sampling), "seed": 8})
    )
    assert first.tokens == again.tokens and first.texts == again.texts
    assert first.tokens != other.tokens


# ----- batching -----
@pytest.mark.parametrize(
    "fields",
    [
        dict(),
        dict(position="learned"),
        dict(position="alibi", sliding_window=5),
        dict(rope=dict(scaling=RopeScaling("dynamic", 2.0, 10))),
    ],
    ids=["rope", "learned", "alibi-window", "dynamic"],
)
def test_left_padded_batch_generates_what_each_prompt_generates_alone(fields: dict) -> None:
    model = tiny(**fields)
    prompts = [[5, 9, 200], [17] * 9, [3, 1, 4, 1, 5, 9]]
    batched = generate(model, prompts, GREEDY).tokens
    assert batched == [generate(model, [p], GREEDY).tokens[0] for p in prompts]
    assert all(len(t) == GREEDY.max_new_tokens for t in batched)


# ----- stopping -----
def test_eos_ends_a_row_and_is_not_returned() -> None:
    model = tiny()
    free = generate(model, [[1, 2, 3], [60, 61]], GREEDY).tokens
    eos = free[0][4]
    stopped = generate(model, [[1, 2, 3], [60, 61]], GREEDY, eos_id=eos).tokens
    assert stopped[0] == free[0][: free[0].index(eos)]
    assert stopped[1] == (free[1][: free[1].index(eos)] if eos in free[1] else free[1])


def test_eos_through_the_text_api() -> None:
    model = tiny()
    free = generate_text(model, EosTokenizer(-1), ["hi"], GREEDY)
    eos = free.tokens[0][5]
    result = generate_text(model, EosTokenizer(eos), ["hi"], GREEDY)
    assert result.tokens[0] == free.tokens[0][: free.tokens[0].index(eos)]
    assert result.decode_steps < GREEDY.max_new_tokens - 1  # the loop ended early


def test_stop_string_cuts_the_text_and_the_stream(tokenizer) -> None:
    model = tiny()
    sampling = SamplingConfig(max_new_tokens=30, temperature=1.0, seed=1)
    free = generate_text(model, tokenizer, ["ab"], sampling).texts[0]
    stop = free[10:12]
    pieces: list[str] = []
    result = generate_text(
        model,
        tokenizer,
        ["ab"],
        SamplingConfig(**{**vars(sampling), "stop": (stop,)}),
        on_text=lambda row, piece: pieces.append(piece),
    )
    assert result.texts[0] == free[: free.index(stop)]
    assert "".join(pieces) == result.texts[0]


def test_streamed_pieces_add_up_to_the_text(tokenizer) -> None:
    model = tiny()
    pieces: dict[int, list[str]] = {0: [], 1: []}
    result = generate_text(
        model,
        tokenizer,
        ["x", "hello"],
        SamplingConfig(max_new_tokens=25, seed=3),
        on_text=lambda row, piece: pieces[row].append(piece),
    )
    assert ["".join(pieces[r]) for r in (0, 1)] == result.texts
    assert result.texts == [tokenizer.decode(t) for t in result.tokens]


# ----- limits -----
def test_context_limit_fails_up_front() -> None:
    model = tiny(max_seq_len=16)
    with pytest.raises(
        ValueError,
        match=r"prompt \(10 tokens\) \+ max_new_tokens \(7\) = 17 exceeds the model's "
        r"context of 16 tokens",
    ):
        generate(model, [[1] * 10], SamplingConfig(max_new_tokens=7))
    assert (
        len(
            generate(
                model,
                [[1] * 10],
                SamplingConfig(max_new_tokens=7, temperature=0, past_context="extrapolate"),
            ).tokens[0]
        )
        == 7
    )
    learned = tiny(position="learned", max_seq_len=16)
    with pytest.raises(ValueError, match="learned positions cannot extrapolate"):
        check_context(learned.config, 10, 7, past_context="extrapolate")
    stretched = tiny(max_seq_len=16, rope=dict(scaling=RopeScaling("yarn", 4.0, 16)))
    check_context(stretched.config, 10, 54, past_context="stop")  # 4 x 16 tokens
    with pytest.raises(ValueError, match="context of 64 tokens"):
        check_context(stretched.config, 10, 55, past_context="stop")


def test_rerope_has_no_context_limit_and_leaky_rerope_the_length_its_slope_maps_into_training() -> (
    None
):
    rerope = tiny(max_seq_len=16, rope=dict(scaling=RopeScaling("rerope", window=4))).config
    assert rerope.context_limit is None
    check_context(rerope, 1000, 1000, past_context="stop")
    leaky = tiny(
        max_seq_len=16, rope=dict(scaling=RopeScaling("leaky_rerope", 2.0, window=4))
    ).config
    limit = leaky.context_limit  # largest relative position 4 + (L - 1 - 4) / 2 <= 15: L <= 27
    assert (
        limit == 27
        and relative_positions(torch.tensor([[limit - 1]]), torch.tensor([[0]]), 4, 2.0) == 15
    )
    with pytest.raises(ValueError, match="context of 27 tokens"):
        check_context(leaky, 20, 8, past_context="stop")


def test_bad_sampling_settings_fail_with_one_line() -> None:
    with pytest.raises(
        ValueError, match=r"SamplingConfig.top_p=1.5 is not allowed: None or a probability"
    ):
        SamplingConfig(top_p=1.5)
    with pytest.raises(ValueError, match=r"SamplingConfig.max_new_tokens=0 is not allowed"):
        SamplingConfig(max_new_tokens=0)
    with pytest.raises(ValueError, match="every prompt at least one token"):
        generate(tiny(), [[1], []], GREEDY)


def test_generation_reports_its_cache_and_restores_training_mode() -> None:
    model = tiny().train()
    result = generate(model, [[1, 2], [3, 4, 5, 6]], GREEDY)
    c = model.config
    assert result.context_len == 4 + GREEDY.max_new_tokens
    # fp32, B=2
    assert (
        result.cache_bytes
        == 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4 * 2 * result.context_len
    )
    assert result.decode_steps == GREEDY.max_new_tokens - 1
    assert model.training


@torch.no_grad()
def greedy_without_cache(model: TransformerLM, prompt: list[int], n: int) -> list[int]:
    """The slow reference: a full forward over the whole sequence for every new token."""
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[len(prompt) :]


@pytest.mark.parametrize(
    "fields",
    [
        # gemma2-style
        dict(sliding_window=4, window_pattern="SF", attn_softcap=5.0, final_softcap=3.0),
        dict(sliding_window=3, n_kv_heads=1),  # mistral-style: every layer windowed, MQA
    ],
)
def test_windowed_generation_equals_greedy_full_forwards(fields: dict) -> None:
    """A left-padded batch decoded past 3 windows with the ring caches gives the tokens of full
    forwards per prompt, while allocating only the window for windowed layers."""
    model = tiny(**fields)
    prompts, n = [[5, 6, 7, 8, 9], [10, 11]], 12
    result = generate(model, prompts, SamplingConfig(max_new_tokens=n, temperature=0))
    assert result.tokens == [greedy_without_cache(model, p, n) for p in prompts]
    c = model.config
    slots = sum(
        min(c.sliding_window, result.context_len) if c.layer_is_sliding(i) else result.context_len
        for i in range(c.n_layers)
    )
    assert result.cache_bytes == 2 * slots * 2 * c.n_kv_heads * c.head_dim * 4  # B=2, K and V, fp32


def test_kv_bytes_table_for_mha_gqa_mqa() -> None:
    rows = kv_bytes_table(
        tiny(n_heads=8, n_kv_heads=8, d_model=64).config, torch.float32, context_len=100
    )
    assert [(r["attention"], r["n_kv_heads"]) for r in rows] == [("MHA", 8), ("GQA", 2), ("MQA", 1)]
    assert [r["bytes_per_token"] for r in rows] == [2 * 2 * k * 8 * 4 for k in (8, 2, 1)]
    assert rows[0]["this_model"] and rows[1]["context_bytes"] == rows[1]["bytes_per_token"] * 100


# ----- per-step Python work -----
def python_calls(fn) -> int:
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize(
    "fields", [dict(), dict(rope=dict(scaling=RopeScaling("dynamic", 2.0, 8)), sliding_window=4)]
)
def test_decode_step_python_work_does_not_grow_with_length(fields: dict) -> None:
    model = tiny(max_seq_len=128, **fields)
    cache = KVCache.for_model(model, 2, 128)
    cache.set_padding(torch.tensor([[0, 1, 1], [1, 1, 1]]))
    token = torch.tensor([[3], [4]])
    counts = {}
    with torch.inference_mode():
        model(torch.tensor([[0, 1, 2], [3, 4, 5]]), cache=cache)
        for length in (10, 100):
            while cache.pos < length:
                model(token, cache=cache)
            counts[length] = python_calls(lambda: model(token, cache=cache))
    assert counts[10] == counts[100]


def test_cli_compile_without_a_cpp_compiler_prints_nothing_but_the_error(
    fake_checkpoint, capsys, monkeypatch
) -> None:
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                "c",
                "--prompt",
                "Hi",
                "--max-new-tokens",
                "4",
                "--compile",
            ]
        )
        == 2
    )
    captured = capsys.readouterr()
    assert (
        captured.out == ""
        and "needs a C++ compiler" in captured.err
        and captured.err.count("\n") == 1
    )


# ----- the CLI -----
@pytest.fixture
def fake_checkpoint(monkeypatch, tokenizer) -> None:
    monkeypatch.setattr(
        "archlab.interop.model_folder.open_model", lambda path: (tiny(max_seq_len=64), tokenizer)
    )


def test_cli_streams_a_prompt_and_is_reproducible(fake_checkpoint, capsys) -> None:
    argv = [
        "generate",
        "--checkpoint",
        "ckpt",
        "--prompt",
        "Hello",
        "--max-new-tokens",
        "9",
        "--seed",
        "4",
        "--top-k",
        "20",
        "--top-p",
        "0.9",
        "--temperature",
        "0.8",
    ]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert first.startswith("Hello") and capsys.readouterr().out == first


def test_cli_reads_a_prompt_file_and_stdin(
    fake_checkpoint, capsys, tmp_path: Path, monkeypatch
) -> None:
    (tmp_path / "prompts.txt").write_text("one\n\ntwo\n", encoding="utf-8")
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                "c",
                "--prompt-file",
                str(tmp_path / "prompts.txt"),
                "--max-new-tokens",
                "4",
                "--temperature",
                "0",
            ]
        )
        == 0
    )
    from_file = capsys.readouterr().out
    assert from_file.startswith("one") and "\n\ntwo" in from_file
    monkeypatch.setattr(sys, "stdin", io.StringIO("one\ntwo\n"))
    assert (
        main(["generate", "--checkpoint", "c", "--max-new-tokens", "4", "--temperature", "0"]) == 0
    )
    assert capsys.readouterr().out == from_file


def test_cli_interactive(fake_checkpoint, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("first\n\nsecond\n/quit\nnever\n"))
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                "c",
                "--interactive",
                "--max-new-tokens",
                "3",
                "--temperature",
                "0",
                "--report-memory",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("first") and lines[1].startswith("second")
    assert "never" not in captured.out
    assert "GQA (2 KV heads)" in captured.err and "<- this model" in captured.err


def test_cli_report_memory(fake_checkpoint, capsys) -> None:
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                "c",
                "--prompt",
                "abc",
                "--max-new-tokens",
                "5",
                "--report-memory",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    c = tiny().config
    per_token = 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4  # fp32
    assert f"context 8 tokens x batch 1); allocated {per_token * 8:,} bytes" in err
    for name, k in (("MHA", 4), ("GQA", 2), ("MQA", 1)):
        assert f"{name} ({k} KV heads): {2 * c.n_layers * k * c.head_dim * 4:,} B/token" in err
    assert "peak process resident memory (RSS)" in err


def test_cli_compile_flag_gives_the_same_text(fake_checkpoint, capsys) -> None:
    argv = [
        "generate",
        "--checkpoint",
        "c",
        "--prompt",
        "Hi",
        "--max-new-tokens",
        "8",
        "--temperature",
        "0",
    ]
    assert main(argv) == 0
    eager = capsys.readouterr().out
    assert main([*argv, "--compile"]) == 0
    assert capsys.readouterr().out == eager


def test_cli_compile_gives_eagers_text_whichever_step_the_decoder_picks(
    fake_checkpoint, capsys, monkeypatch
) -> None:
    """`--compile` decodes with the step the decoder measures fastest (compiled with reductions,
    compiled with MKL, or eager) and says which; the text is eager's every time."""
    argv = [
        "generate",
        "--checkpoint",
        "c",
        "--prompt",
        "Hi",
        "--max-new-tokens",
        "8",
        "--temperature",
        "0",
    ]
    assert main(argv) == 0
    eager = capsys.readouterr().out
    for wins, fastest in ((True, "compiled reductions"), (False, "compiled"), (False, "eager")):
        monkeypatch.setattr("archlab.infer.engine.reduction_gemvs_win", lambda m, wins=wins: wins)
        monkeypatch.setattr(
            "archlab.infer.engine.Decoder._time_steps",
            lambda self, mode, batch, n, fastest=fastest: 1.0 if mode == fastest else 2.0,
        )
        assert main([*argv, "--compile"]) == 0
        out = capsys.readouterr()
        assert out.out == eager and f"decoding {fastest} (measured faster here)" in out.err


def test_cli_errors_are_one_line(fake_checkpoint, capsys) -> None:
    assert (
        main(["generate", "--checkpoint", "c", "--prompt", "x" * 60, "--max-new-tokens", "10"]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("archlab generate: error: prompt (60 tokens)") and "\n" not in err
    assert main(["generate", "--checkpoint", "c", "--prompt", "x", "--top-p", "2"]) == 2
    assert "SamplingConfig.top_p=2.0 is not allowed" in capsys.readouterr().err


def test_cli_checkpoint_errors(capsys, tmp_path: Path) -> None:
    assert main(["generate", "--checkpoint", str(tmp_path / "missing"), "--prompt", "x"]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}), encoding="utf-8")
    assert main(["generate", "--checkpoint", str(tmp_path), "--prompt", "x"]) == 2
    assert "this Hugging Face folder has no tokenizer.json" in capsys.readouterr().err


def test_cli_with_a_saved_run(capsys, tmp_path: Path, tokenizer) -> None:
    from archlab.checkpoint import save_checkpoint, tied_aliases

    model = tiny(max_seq_len=64, tie_embeddings=True)
    save_checkpoint(
        tmp_path / "run",
        1,
        model.state_dict(),
        {},
        {},
        {"model": model.config.to_dict()},
        tokenizer.save(tmp_path / "tok"),
        aliases=tied_aliases(model),
    )
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                str(tmp_path / "run"),
                "--prompt",
                "ab",
                "--max-new-tokens",
                "6",
                "--temperature",
                "0",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    expected = generate_text(
        model, tokenizer, ["ab"], SamplingConfig(max_new_tokens=6, temperature=0)
    ).texts[0]
    assert capsys.readouterr().out == "ab" + expected + "\n"


def test_token_ids_outside_the_vocabulary_fail_before_compute() -> None:
    model = tiny()
    with pytest.raises(
        ValueError, match=r"token id 256 is outside the model's vocabulary \(0..255\)"
    ):
        generate(model, [[1, 2], [3, 256]], GREEDY)


@pytest.mark.parametrize(
    ("prompt", "wrong"),
    [([1.5, 2], "1.5"), ([1, 2.0], "2.0"), ([True, 2], "True"), (["a", 2], "'a'")],
    ids=["float", "whole-float", "bool", "str"],
)
def test_token_ids_that_are_not_integers_fail_in_one_line(prompt: list, wrong: str) -> None:
    with pytest.raises(
        ValueError,
        match=rf"token id {re.escape(wrong)} is not an integer: prompts are "
        "lists of int token ids",
    ):
        generate(tiny(), [[3, 4], prompt], GREEDY)


def test_cli_default_max_new_tokens_is_clipped_to_the_context_with_a_note(
    fake_checkpoint, capsys, monkeypatch
) -> None:
    """The model's context is 64: the default 128 new tokens cannot fit, so it becomes 64 - prompt
    length (the README's `generate --interactive` on a 128-token model); a value the user gave
    is refused instead."""
    assert main(["generate", "--checkpoint", "c", "--prompt", "Hello", "--temperature", "0"]) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        "archlab generate: --max-new-tokens 59 (the default 128 clipped to the model's 64-token "
        "context after a 5-token prompt)\n"
    )
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                "c",
                "--prompt",
                "Hello",
                "--temperature",
                "0",
                "--max-new-tokens",
                "59",
            ]
        )
        == 0
    )
    explicit = capsys.readouterr()
    # the same 59 tokens; a given value gets no note
    assert captured.out == explicit.out and explicit.err == ""
    monkeypatch.setattr(sys, "stdin", io.StringIO("ab\nabcd\n"))
    assert main(["generate", "--checkpoint", "c", "--interactive", "--temperature", "0"]) == 0
    err = capsys.readouterr().err
    assert "--max-new-tokens 62 (the default" in err and "--max-new-tokens 60 (the default" in err
    assert (
        main(["generate", "--checkpoint", "c", "--prompt", "Hello", "--max-new-tokens", "128"]) == 2
    )
    assert "exceeds the model's context of 64 tokens" in capsys.readouterr().err


def test_cli_missing_prompt_file_is_one_line(fake_checkpoint, capsys, tmp_path: Path) -> None:
    assert main(["generate", "--checkpoint", "c", "--prompt-file", str(tmp_path / "nope.txt")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"archlab generate: error: --prompt-file {tmp_path / 'nope.txt'}: no such file (one prompt "
        "per line; '-' reads stdin)\n"
    )


def test_cli_a_binary_prompt_file_is_one_line_naming_it(
    fake_checkpoint, capsys, tmp_path: Path, monkeypatch
) -> None:
    """A binary file given by mistake: the file, the line and the byte that is not UTF-8 (not a bare
    codec error); stdin is named as stdin."""
    (tmp_path / "prompts.bin").write_bytes(b"def f():\r\n  re\xe9turn\n")
    assert (
        main(["generate", "--checkpoint", "c", "--prompt-file", str(tmp_path / "prompts.bin")]) == 2
    )
    assert capsys.readouterr().err == (
        f"archlab generate: error: --prompt-file {tmp_path / 'prompts.bin'} is not UTF-8 text: "
        "line 2 has byte 0xe9 at column 5; give a text file, one prompt per line\n"
    )
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ok\n\xff\xfe\n"), encoding="utf-8")
    )
    assert main(["generate", "--checkpoint", "c", "--prompt-file", "-"]) == 2
    assert capsys.readouterr().err == (
        "archlab generate: error: --prompt-file - (stdin) is not UTF-8 text (byte "
        "0xff); pipe text, one prompt per line\n"
    )
    # \r\n and \r end lines too
    (tmp_path / "prompts.txt").write_bytes("caf\u00e9\r\n\r\nna\u00efve\rlast".encode())
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                "c",
                "--prompt-file",
                str(tmp_path / "prompts.txt"),
                "--max-new-tokens",
                "2",
                "--temperature",
                "0",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out  # three prompts, each its own continuation after a blank line
    assert out.startswith("caf\u00e9") and "\n\nna\u00efve" in out and "\n\nlast" in out, out
