"""scripts/behaviour_hashes.py compares fingerprints within one CPU class only: a table recorded
on this machine's class is checked line by line, another class's table is never compared (exit
2, saying so), a case with no recorded line is named, never called changed (exit 2), and the
fingerprints themselves, the optimizers', BPE data's and the lab's measures' included, are the same
when computed twice on this machine."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from archlab.train.hardware import cpu_class

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location(
        "behaviour_hashes", REPO / "scripts" / "behaviour_hashes.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


LINES = [
    "llama                    losses=aa weights=bb optimizer=cc decode=dd",
    "gau                      losses=11 weights=22 optimizer=33 decode=44",
]


def test_a_table_is_compared_with_its_own_class_only(script) -> None:
    text = "# a note\n# cpu: GenuineIntel AVX512\n" + "\n".join(LINES) + "\n"
    tables = script.read_tables(text)
    assert tables == {"GenuineIntel AVX512": {"llama": LINES[0], "gau": LINES[1]}}
    assert script.compare(LINES, tables, "GenuineIntel AVX512", "t.txt") == (
        0,
        "unchanged on GenuineIntel AVX512",
    )
    changed = [LINES[0].replace("weights=bb", "weights=bc"), LINES[1]]
    assert script.compare(changed, tables, "GenuineIntel AVX512", "t.txt") == (
        1,
        "CHANGED on GenuineIntel AVX512: llama",
    )
    # the same lines, another class
    code, message = script.compare(LINES, tables, "AuthenticAMD AVX2", "t.txt")
    assert (
        code == 2
        and "no table for this CPU class (AuthenticAMD AVX2; it has: GenuineIntel AVX512)"
        in message
    )
    assert script.compare(LINES, {}, "AuthenticAMD AVX2", "t.txt")[0] == 2


def test_a_case_without_a_recorded_line_is_named_and_never_called_changed(script) -> None:
    tables = script.read_tables("# cpu: X AVX2\n" + LINES[0] + "\n")
    # gau was added since the table was recorded
    code, message = script.compare(LINES, tables, "X AVX2", "t.txt")
    assert code == 2 and message == (
        "unchanged on X AVX2: 1 cases; no line recorded on X AVX2 for: gau (record "
        "them at the base commit with --record t.txt --only gau)"
    )
    changed = [LINES[0].replace("losses=aa", "losses=ab"), LINES[1]]
    code, message = script.compare(changed, tables, "X AVX2", "t.txt")
    assert code == 1 and message.startswith(
        "CHANGED on X AVX2: llama; no line recorded on X AVX2 for: gau"
    )


def test_recording_replaces_this_classes_table_and_keeps_the_rest(script) -> None:
    text = "# recorded on an Intel Xeon\n# cpu: GenuineIntel AVX512\n" + LINES[0] + "\n"
    amd = script.record_table(text, "AuthenticAMD AVX2", LINES)
    assert amd.startswith(text)  # the other class's table and its note kept as they were
    assert script.read_tables(amd)["AuthenticAMD AVX2"] == {"llama": LINES[0], "gau": LINES[1]}
    again = script.record_table(amd, "AuthenticAMD AVX2", [LINES[1]])
    assert again.startswith(text) and script.read_tables(again)["AuthenticAMD AVX2"] == {
        "gau": LINES[1]
    }
    intel = script.record_table(amd, "GenuineIntel AVX512", [LINES[1]])
    assert script.read_tables(intel) == {
        "GenuineIntel AVX512": {"gau": LINES[1]},
        "AuthenticAMD AVX2": {"llama": LINES[0], "gau": LINES[1]},
    }


@pytest.mark.kernels
def test_fingerprints_recorded_here_check_unchanged_and_a_changed_line_is_found(
    script, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two computations on this machine: record the `gau` case, then recompute and check
    it (bitwise equal)."""
    table = tmp_path / "table.txt"
    assert script.main(["--only", "gau", "--record", str(table)]) == 0
    assert f"# cpu: {cpu_class()}" in table.read_text(encoding="utf-8").splitlines()
    assert script.main(["--only", "gau", "--check", str(table)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"unchanged on {cpu_class()}"
    recorded = table.read_text(encoding="utf-8")
    flipped = recorded.replace("losses=", "losses=0", 1)
    table.write_text(flipped, encoding="utf-8")
    assert script.main(["--only", "gau", "--check", str(table)]) == 1
    table.write_text(
        recorded.replace(f"# cpu: {cpu_class()}", "# cpu: another class"), encoding="utf-8"
    )
    assert script.main(["--only", "gau", "--check", str(table)]) == 2


@pytest.mark.kernels
def test_the_new_kinds_of_case_fingerprint_the_same_twice(
    script, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An optimizer case, BPE-dropout's data and the lab's measures on a BPE run: recorded, then
    recomputed in the same process and checked (bitwise equal); the measures line holds the prepared
    folder's hash and the measures'."""
    table = tmp_path / "table.txt"
    cases = ["tiger-adamw-emb", "bpe-dropout", "lab-measures-bpe"]
    assert script.main(["--only", *cases, "--record", str(table)]) == 0
    lines = script.read_tables(table.read_text(encoding="utf-8"))[cpu_class()]
    assert (
        lines["bpe-dropout"].split()[1:] == [lines["bpe-dropout"].split()[1]]
        and "data=" in lines["bpe-dropout"]
    )
    assert [f.split("=")[0] for f in lines["lab-measures-bpe"].split()[1:]] == [
        "losses",
        "weights",
        "optimizer",
        "decode",
        "data",
        "measures",
    ]
    assert script.main(["--only", *cases, "--check", str(table)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"unchanged on {cpu_class()}"


def test_bpe_dropouts_fingerprint_holds_what_is_deterministic(script, tmp_path: Path) -> None:
    """Two preparations draw different dropout segmentations (the library's RNG is unseeded), so
    their train.bin differ; the fingerprint (request, tokenizer, val.bin, the train text decoded) is
    the same, and it moves when the text does."""
    from archlab.data.prepare import prepare_data

    script.corpus(tmp_path)
    a, b = (
        prepare_data(str(tmp_path / "corpus.txt"), tmp_path / name, "bpe", 320, bpe_dropout=0.1)
        for name in ("a", "b")
    )
    assert (a / "train.bin").read_bytes() != (b / "train.bin").read_bytes()
    assert (a / "val.bin").read_bytes() == (b / "val.bin").read_bytes()
    assert script.dropout_data(a) == script.dropout_data(b)
    train = np.fromfile(b / "train.bin", dtype=json.loads((b / "meta.json").read_text())["dtype"])
    # another token (each id of a BPE vocabulary is another string): another text
    train[0] = (train[0] + 1) % 256
    train.tofile(b / "train.bin")
    assert script.dropout_data(a) != script.dropout_data(b)


def test_check_of_a_missing_file_is_one_line_before_any_work(
    script, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        script.main(["--check", str(tmp_path / "none.txt")])
    assert exit_.value.code == 2
    assert (
        f"--check {tmp_path / 'none.txt'}: no such file (make one with --record)"
        in capsys.readouterr().err
    )
