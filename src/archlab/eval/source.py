"""What an evaluation reads, resolved and checked before any weights are loaded (torch-free): the
model's config from an archlab checkpoint, run folder or Hugging Face folder, the held-out data in
the grammar `train` and `data prepare` use, and the folder its results go to.

Held-out data (`--data`): a text file (scored as it is), or any other corpus `train --data` takes --
`stdlib`, a folder, a JSONL file, `passkey`, `hf:NAME[:CONFIG]` -- read through its validation
documents (the split rule of data/encode.py, so text a model trained on the same corpus never saw),
or a prepared data folder (its val split). Without `--data`, an archlab run's own prepared data; a
Hugging Face folder has none and must be given one.

Results: `--out` is refused when it is a file, or when it already holds this evaluation's results
and `--force` is not given; without `--out`, a new folder named by the evaluation, the model
and the time (`eval-length/tiny-step_0000200-20250101-120000`), so a second run never replaces
the first's table.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from archlab.data.corpus import check_source
from archlab.interop.model_folder import ModelFolder, find_model
from archlab.nn.config import ModelConfig
from archlab.run_folder import CHECKPOINTS
from archlab.train.lock import check_folder


@dataclass(frozen=True)
class EvalSource:
    """A model to evaluate, known from its config alone, and the held-out data it is scored on."""

    model: ModelFolder  # where the model is: a Hugging Face folder or an archlab checkpoint
    config: ModelConfig
    data: str | None  # the held-out data spec (the run's prepared folder when --data is absent)

    @property
    def path(self) -> Path:
        return self.model.path

    @property
    def hf(self) -> bool:
        return self.model.hf

    @property
    def checkpoint(self) -> Path | None:
        return self.model.checkpoint

    @property
    def name(self) -> str:
        """A short label of the model for folder names: RUN-step_N, or the Hugging
        Face folder's name."""
        if self.checkpoint is None:
            return self.path.resolve().name
        run = (
            self.checkpoint.parent.parent
            if self.checkpoint.parent.name == CHECKPOINTS
            else self.checkpoint.parent
        )
        return f"{run.resolve().name}-{self.checkpoint.name}"


def eval_source(path: str, data: str | None = None, needs_data: bool = True) -> EvalSource:
    """The model's config and the held-out data of `archlab eval ACTION --checkpoint PATH [--data
    DATA]`, each refused in one line before anything is loaded; `needs_data=False` (passkey: its
    prompts are synthetic) skips the data."""
    model = find_model(path)
    model.check_tokenizer()
    config = model.config()
    if not needs_data:
        return EvalSource(model, config, None)
    if data is not None:
        check_source(data)
    else:
        data = str(run_data_folder(path, model.checkpoint, model.saved()))
    return EvalSource(model, config, data)


def run_data_folder(path: str, checkpoint: Path | None, saved: dict) -> Path:
    """The prepared data folder the run of `checkpoint` trained on (its val split is held out),
    or a refusal."""
    train = saved.get("train") if isinstance(saved.get("train"), dict) else None
    if checkpoint is None or train is None:
        what = (
            "a Hugging Face folder"
            if checkpoint is None
            else "a checkpoint without a training run (converted)"
        )
        raise ValueError(
            f"--data is needed with {what}, which has no prepared data of its own: give a held-out "
            "text file, a corpus (stdlib, a folder, JSONL, hf:NAME) or a prepared data folder"
        )
    data = train.get("data", {}) if isinstance(train.get("data"), dict) else {}
    source = Path(str(data.get("source", "")))
    run_dir = checkpoint.parent.parent
    folder = (
        source if (source / "meta.json").is_file() else Path(data.get("dir") or run_dir / "data")
    )
    if not (folder / "meta.json").is_file():
        raise FileNotFoundError(
            f"--checkpoint {path}: the run's prepared data {folder} is gone (no meta.json); give "
            "--data (a held-out text file, a corpus or a prepared data folder)"
        )
    return folder


def stamp() -> str:
    """The local time as a folder name's suffix, to the second."""
    return time.strftime("%Y%m%d-%H%M%S")


def output_folder(
    out: str | None, kind: str, source: EvalSource, files: tuple[str, ...], force: bool
) -> Path:
    """Where evaluation `kind` writes `files`: `out`, unless it is a file or already holds one of
    them (then `force` is needed), or a new folder eval-KIND/MODEL-TIME."""
    if out is not None:
        folder = Path(out)
        check_folder(folder)
        held = [name for name in files if (folder / name).exists()]
        if held and not force:
            raise ValueError(
                f"--out {out} already holds {', '.join(held)} of an earlier evaluation: choose "
                f"another --out, leave it out (a new folder under eval-{kind}/), or pass --force "
                "to replace them"
            )
        return folder
    base = Path(f"eval-{kind}") / f"{source.name}-{stamp()}"
    check_folder(base)
    folder, n = base, 1
    while folder.exists():  # two evaluations in the same second
        n += 1
        folder = base.with_name(f"{base.name}-{n}")
    return folder
