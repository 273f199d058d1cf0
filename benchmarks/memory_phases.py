"""Where a process's resident memory peaks: `archlab ...` run in this process, its phases
timed and sampled.

python benchmarks/memory_phases.py train --init-from HF --lora_rank 8 ... # any archlab command line

A thread reads /proc/self/status every millisecond (RssAnon: the process's own memory; RssFile:
pages of mapped files, e.g. safetensors' memory maps, which count in RSS and in getrusage's peak but
belong to the page cache) and charges each sample to the innermost phase running: the functions of
PHASES, wrapped in place. It prints, per phase, the peak RssAnon and RssFile and the peak of their
sum, and the kernel's own peak (VmHWM) to check that the sampling saw the true one. Linux only.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

# after PYTHONPATH: another checkout can be measured
sys.path.append(str(Path(__file__).resolve().parents[1] / "src"))

# (module, attribute path, phase name): wrapped where the caller looks them up
PHASES = [
    ("archlab.interop.model_folder", "ModelFolder.load", "load the source (from_hf / load_model)"),
    ("archlab.interop.surgery", "adapt", "adapt it to the run's config"),
    ("archlab.train.preflight", "open_run_data", "prepare data"),
    ("archlab.train.state", "RunState._build_model", "build the training model from it"),
    ("archlab.train.state", "base_digest", "sha256 of the frozen base"),
    ("archlab.train.state", "select_trainable", "freeze / add LoRA adapters"),
    ("archlab.train.state", "build_optimizer", "build the optimizer"),
    ("archlab.train.trainer", "Trainer.evaluate", "evaluate"),
    ("archlab.train.trainer", "Trainer.train_step", "train step"),
    ("archlab.train.state", "dist_utils.full_state_dicts", "save: gather state dicts"),
    ("archlab.train.state", "merged_state", "save: merge W + BA"),
    ("archlab.train.state", "save_checkpoint", "save: write the files"),
]
KB = 1024


class Sampler(threading.Thread):
    """Samples RssAnon / RssFile into the phase on top of `stack`."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stack: list[str] = ["outside these phases (imports, config, between calls)"]
        self.order: list[str] = [self.stack[0]]
        # total, anon, file at that
        self.peak: dict[str, tuple[int, int, int]] = defaultdict(lambda: (0, 0, 0))
        self.peak_anon: dict[str, int] = defaultdict(int)
        self.peak_file: dict[str, int] = defaultdict(int)
        self.running = True

    def run(self) -> None:
        while self.running:
            self.sample()
            time.sleep(0.001)

    def sample(self) -> None:
        fields = {}
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(("RssAnon:", "RssFile:", "RssShmem:")):
                    name, value, _ = line.split()
                    fields[name[:-1]] = int(value) * KB
        anon, file = fields["RssAnon"], fields["RssFile"] + fields.get("RssShmem", 0)
        phase = self.stack[-1]
        if anon + file > self.peak[phase][0]:
            self.peak[phase] = (anon + file, anon, file)
        self.peak_anon[phase] = max(self.peak_anon[phase], anon)
        self.peak_file[phase] = max(self.peak_file[phase], file)

    def wrap(self, fn: Callable, name: str) -> Callable:
        @functools.wraps(fn)
        def wrapped(*args: object, **kwargs: object) -> object:
            # nested: by their path
            label = name if len(self.stack) == 1 else f"{self.stack[-1]} > {name}"
            self.sample()
            self.stack.append(label)
            if label not in self.order:
                self.order.append(label)
            try:
                return fn(*args, **kwargs)
            finally:
                self.sample()
                self.stack.pop()

        return wrapped


def install(sampler: Sampler) -> None:
    for module_name, path, name in PHASES:
        owner = importlib.import_module(module_name)
        *parents, leaf = path.split(".")
        for part in parents:
            owner = getattr(owner, part)
        setattr(owner, leaf, sampler.wrap(getattr(owner, leaf), name))


def vm_hwm() -> int:
    with open("/proc/self/status", encoding="ascii") as handle:
        return next(int(line.split()[1]) * KB for line in handle if line.startswith("VmHWM:"))


def main() -> int:
    from archlab.cli import main as archlab_main

    sampler = Sampler()
    install(sampler)
    sampler.start()
    status = archlab_main(sys.argv[1:])
    sampler.running = False
    sampler.join()
    gb = 1e9
    print("\n| phase | peak RSS (GB) | its anon + file (GB) | peak anon | peak file |")
    print("|---|---|---|---|---|")
    for phase in sampler.order:
        total, anon, file = sampler.peak[phase]
        print(
            f"| {phase} | {total / gb:.2f} | {anon / gb:.2f} + {file / gb:.2f} | "
            f"{sampler.peak_anon[phase] / gb:.2f} | {sampler.peak_file[phase] / gb:.2f} |"
        )
    top = max(sampler.peak, key=lambda p: sampler.peak[p][0])
    print(
        f"\nsampled peak {sampler.peak[top][0] / gb:.2f} GB in '{top}'; the kernel's "
        f"VmHWM {vm_hwm() / gb:.2f} GB"
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
