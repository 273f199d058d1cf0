"""What trained a run, recorded by the run: RUN_DIR/provenance.json.

Every start of `archlab train` (and of a lab worker's run, which trains through the same `train()`)
appends one session to the run folder's record before its first step (a session runs from its
`from_step` to the next session's, or to the run's last checkpoint):

    {"format": 1, "sessions": [{
      "started_at": "2026-12-05T10:00:00+00:00", "from_step": 0, "resumed": false,
      "code": {"commit": "94d249a...", "dirty": false},    # "unknown" outside a git checkout
      "versions": {"archlab": "0.1.0", "torch": "2.13.0+cpu", "python": "3.11.7"},
      "machine": {"cpu_model": "AMD EPYC", "cpu_class": "AuthenticAMD AVX2",
                  "cpu_flags": "avx2 fma ...", "physical_cores": 2, "logical_cpus": 2,
                  "threads": 1, "gpu": null},
      "data": {"folder": "runs/r/data", "sha256": "..."},  # data.prepare.prepared_hash
      "execution": {"mode": "default", "device": "cpu", "dtype": "fp32", "world_size": 1},
      "changed": []}]}                                     # resumed: what differs from before

A resumed run appends a session and never rewrites an earlier one. Where its code, versions, CPU
class, threads, data or execution differ from the previous session's, `changed` lists each
difference and a warning names them: a run resumed under another commit shows it. The lab's pages
aggregate these records (each commit with its runs) and never reconstruct them.

The execution mode comes from the run's settings (`execution_mode`), named as the lab's recorded
modes are (`archlab ablate --mode`): "compiled" with `precision.compile`, "bf16" with
`precision.dtype bf16`, both as "compiled+bf16", else "default" (eager fp32, with nn/fast/'s CPU
fast paths where they apply).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

import torch

from archlab.data.prepare import prepared_hash
from archlab.storage import replace_text, writing
from archlab.train import hardware
from archlab.train.config import TrainConfig

logger = logging.getLogger(__name__)

RECORD = "provenance.json"  # in the run folder
FORMAT = 1
UNKNOWN = "unknown"
PACKAGE = Path(__file__).resolve().parents[1]  # src/archlab of the code that runs
# the fields whose change between sessions changes the numbers a run makes (a session's "changed")
COMPARED = (
    ("code", "commit"),
    ("code", "dirty"),
    ("versions", "archlab"),
    ("versions", "torch"),
    ("versions", "python"),
    ("machine", "cpu_class"),
    ("machine", "threads"),
    ("data", "sha256"),
    ("execution", "mode"),
    ("execution", "device"),
    ("execution", "dtype"),
    ("execution", "world_size"),
)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()


def source_state(package: Path = PACKAGE) -> dict:
    """The git commit of the checkout `package` (archlab's source) runs from, and whether the
    package has local changes there; "unknown" for both when it does not run from a git checkout
    that tracks it (an installed wheel, a site-packages inside another repository, no git),
    never an error."""
    try:
        top = Path(_git(package, "rev-parse", "--show-toplevel"))
        _git(
            top, "ls-files", "--error-unmatch", "--", str(package / "__init__.py")
        )  # tracked there, not copied in
        commit = _git(top, "rev-parse", "HEAD")
        dirty = bool(_git(top, "status", "--porcelain", "--", str(package)))
    except (OSError, subprocess.SubprocessError):
        return {"commit": UNKNOWN, "dirty": UNKNOWN}
    return {"commit": commit, "dirty": dirty}


def versions() -> dict[str, str]:
    """archlab's, torch's and Python's versions."""
    try:
        archlab = metadata.version("archlab")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        archlab = UNKNOWN
    return {"archlab": archlab, "torch": torch.__version__, "python": platform.python_version()}


def machine(device: torch.device) -> dict:
    """The CPU (model, class of kernels, every flag), its cores, the training threads, and the
    GPU that trains, if any."""
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {
        "cpu_model": hardware.cpu_model(),
        "cpu_class": hardware.cpu_class(),
        "cpu_flags": " ".join(sorted(hardware.cpu_flags())) or UNKNOWN,
        "physical_cores": hardware.physical_cores(),
        "logical_cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "gpu": gpu,
    }


def execution_mode(train: TrainConfig) -> str:
    """How the steps execute, from the run's settings, in the names of the lab's recorded modes
    (`archlab ablate --mode`): "compiled" (precision.compile), "bf16" (precision.dtype bf16,
    autocast), both joined by "+", else "default" (eager fp32)."""
    p = train.precision
    modes = (["compiled"] if p.compile else []) + (["bf16"] if p.dtype == "bf16" else [])
    return "+".join(modes) or "default"


def session(
    train: TrainConfig,
    data_folder: Path,
    device: torch.device,
    world_size: int,
    step: int = 0,
    resumed: bool = False,
) -> dict:
    """This start of the run, measured now (module doc), from `step` (a resumed checkpoint's)."""
    return {
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "from_step": step,
        "resumed": resumed,
        "code": source_state(),
        "versions": versions(),
        "machine": machine(device),
        "data": {"folder": str(data_folder), "sha256": prepared_hash(data_folder)},
        "execution": {
            "mode": execution_mode(train),
            "device": device.type,
            "dtype": train.precision.dtype,
            "world_size": world_size,
        },
        "changed": [],
    }


def read_record(run_dir: str | Path) -> dict | None:
    """A run folder's record, or None where the run wrote none (trained before runs recorded
    one) or it is unreadable."""
    try:
        record = json.loads((Path(run_dir) / RECORD).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("sessions"), list) else None


def changes(before: dict, now: dict) -> list[str]:
    """Each compared field (COMPARED) that differs between two sessions, as
    'section.field: old -> new'."""
    out = []
    for section, key in COMPARED:
        old, new = before.get(section, {}).get(key), now.get(section, {}).get(key)
        if old != new:
            out.append(f"{section}.{key}: {old} -> {new}")
    return out


def _write(run_dir: Path, record: dict) -> None:
    path = run_dir / RECORD
    with writing(path, "the run's provenance"):
        replace_text(path, json.dumps(record, indent=1))


def start_session(run_dir: str | Path, now: dict) -> list[str]:
    """Append session `now` to the run's record (a new record for a new run, or for a resumed run
    trained before runs recorded one: its earlier sessions are unknown, and `changed` says so);
    returns what differs from the previous session, logged as a warning."""
    run_dir = Path(run_dir)
    record = read_record(run_dir) if now["resumed"] else None
    if record is None:
        record = {"format": FORMAT, "sessions": []}
        if now["resumed"]:
            now["changed"] = [
                f"the steps before {now['from_step']} were trained without a provenance record"
            ]
    else:
        now["changed"] = changes(record["sessions"][-1], now) if record["sessions"] else []
    record["sessions"].append(now)
    _write(run_dir, record)
    if now["resumed"] and now["changed"]:
        logger.warning(
            "%s resumed at step %d with a difference from its last session: %s",
            run_dir,
            now["from_step"],
            "; ".join(now["changed"]),
        )
    return now["changed"]
