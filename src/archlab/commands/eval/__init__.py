"""`archlab eval`: one module per action, each with its flags and the function that runs it.

`archlab eval length` (length.py): loss or next-token accuracy against context length per RoPE
extension method, on plain or repeated samples (archlab.eval.length), as a markdown table (printed
and saved), a CSV and a PNG; `archlab eval passkey` (passkey.py): passkey retrieval accuracy per
length and depth (archlab.eval.passkey), as a table and a heat-map PNG; `archlab eval continuation`
(continuation.py): mid-token continuation accuracy on held-out text cut at random bytes, with and
without token healing (archlab.eval.continuation), as a table and a CSV of every cut. inputs.py
holds what they share.

The evaluations, checkpoints and plots import torch: each action imports them in the function that
runs, so `--help` (the method, metric and sample names of eval/variants.py) answers without it;
eval/source.py reads configs only.
"""

from __future__ import annotations

import argparse

from archlab.commands.eval import continuation, length, passkey


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval", help="evaluate a checkpoint (length extrapolation, passkey, mid-token continuation)"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    length.add_parser(actions)
    passkey.add_parser(actions)
    continuation.add_parser(actions)
