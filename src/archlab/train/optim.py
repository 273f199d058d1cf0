"""Optimizers and their parameter groups: AdamW, Lion and Tiger, with weight decay on matrices only.

Weight decay pulls weights towards zero; it helps the linear maps of attention and the MLP, but on norm
gains, biases and (usually) embedding rows it only fights the model (GPT-3, LLaMA and PaLM all decay with
0.1 and skip those). `param_groups` splits a model's parameters by what they are, counting a tied
embedding / head matrix once, and `build_optimizer` turns the groups into one of the `OPTIMIZERS`.

- AdamW: `torch.optim.AdamW` (Loshchilov & Hutter, arXiv 1711.05101), fused on CPU and CUDA, foreach elsewhere.
- Lion: sign of an interpolated momentum (Chen et al., arXiv 2302.06675, Algorithm 2). Because every
  coordinate moves by exactly lr, use a 3-10x smaller lr and a 3-10x larger weight decay than AdamW.
- Tiger: Lion with beta1 == beta2, so a single momentum both decides the sign and is stored (Su Jianlin,
  https://kexue.fm/archives/9512); default beta 0.945.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.tensor import DTensor

FUSED_ADAMW_DEVICES = ("cpu", "cuda")  # where torch.optim.AdamW(fused=True) has kernels

# name -> default betas; the builders below read them when the config leaves betas unset.
DEFAULT_BETAS: dict[str, tuple[float, ...]] = {
    "adamw": (0.9, 0.95),  # beta2 0.95 instead of 0.999: faster reaction to loss spikes (GPT-3, LLaMA)
    "lion": (0.9, 0.99),  # the paper's defaults for language modelling
    "tiger": (0.945,),  # kexue.fm/archives/9512
}


@dataclass(frozen=True)
class ParamGroupNames:
    """Which parameter names go to which group; each Parameter appears once (tied weights deduplicated)."""

    decay: list[str]
    no_decay: list[str]


def _classify(module: nn.Module, name: str, param: nn.Parameter, decay_embeddings: bool) -> bool:
    """True when weight decay applies: weight matrices of linear maps (and embeddings if asked).

    Any other matrix is a lookup table (token embedding, learned positions, relative-position bias) and
    counts as an embedding; vectors (norm gains, biases) are never decayed.
    """
    if isinstance(module, nn.Linear) and name == "weight":
        return True
    return param.dim() >= 2 and decay_embeddings


def split_param_names(model: nn.Module, decay_embeddings: bool = False) -> ParamGroupNames:
    """Name the trainable parameters that get weight decay and those that don't.

    A tied head shares its Parameter with the token embedding: the first owner in module order (the
    embedding, registered first) decides its group, and it is listed once under that name.
    """
    decay: list[str] = []
    no_decay: list[str] = []
    seen: set[int] = set()
    for mod_name, module in model.named_modules():
        for p_name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            full = f"{mod_name}.{p_name}" if mod_name else p_name
            (decay if _classify(module, p_name, param, decay_embeddings) else no_decay).append(full)
    return ParamGroupNames(decay=decay, no_decay=no_decay)


def param_groups(model: nn.Module, weight_decay: float, decay_embeddings: bool = False) -> list[dict]:
    """Two optimizer groups, `{"params", "weight_decay"}` (decayed first); an empty group is dropped."""
    names = split_param_names(model, decay_embeddings)
    by_name = dict(model.named_parameters())  # named_parameters already drops the tied duplicate
    groups = [
        {"params": [by_name[n] for n in names.decay], "weight_decay": weight_decay},
        {"params": [by_name[n] for n in names.no_decay], "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]


def _use_foreach(params: list[torch.Tensor]) -> bool:
    """Foreach kernels need plain tensors on one device; FSDP2's DTensors take the per-tensor loop."""
    devices = {p.device for p in params}
    return len(devices) <= 1 and all(type(p.data) is torch.Tensor for p in params)


class Lion(torch.optim.Optimizer):
    """Lion (arXiv 2302.06675, Algorithm 2) with decoupled weight decay.

    c = beta1 * m + (1 - beta1) * g;  p <- p * (1 - lr * wd) - lr * sign(c);  m <- beta2 * m + (1 - beta2) * g
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1e-4,
        betas: tuple[float, float] = DEFAULT_BETAS["lion"],  # type: ignore[assignment]
        weight_decay: float = 0.0,
    ) -> None:
        if lr < 0:
            raise ValueError(f"Lion: lr must be >= 0, got {lr}")
        if not all(0.0 <= b < 1.0 for b in betas) or len(betas) != 2:
            raise ValueError(f"Lion: betas must be two values in [0, 1), got {betas}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay})

    def _momenta(self, params: list[torch.Tensor]) -> list[torch.Tensor]:
        for p in params:
            if "exp_avg" not in self.state[p]:
                self.state[p]["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return [self.state[p]["exp_avg"] for p in params]

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            beta1, beta2 = group["betas"]
            _sign_step(params, grads, self._momenta(params), group["lr"], group["weight_decay"], beta1, beta2)
        return loss


class Tiger(Lion):
    """Tiger (kexue.fm/archives/9512): Lion with one beta, so the stored momentum is the signed one.

    m <- beta * m + (1 - beta) * g;  p <- p * (1 - lr * wd) - lr * sign(m)
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1e-4,
        beta: float = DEFAULT_BETAS["tiger"][0],
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr=lr, betas=(beta, beta), weight_decay=weight_decay)


def _sign_step(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    momenta: list[torch.Tensor],
    lr: float,
    weight_decay: float,
    beta1: float,
    beta2: float,
) -> None:
    """The shared Lion/Tiger update, with foreach kernels where the tensors allow it."""
    if _use_foreach(params):
        if weight_decay:
            torch._foreach_mul_(params, 1.0 - lr * weight_decay)
        # lerp(m, g, 1 - b) = b * m + (1 - b) * g, in one kernel
        update = torch._foreach_lerp(momenta, grads, 1.0 - beta1)
        torch._foreach_sign_(update)
        torch._foreach_add_(params, update, alpha=-lr)
        torch._foreach_lerp_(momenta, grads, 1.0 - beta2)
        return
    for p, g, m in zip(params, grads, momenta):
        if weight_decay:
            p.mul_(1.0 - lr * weight_decay)
        p.add_(torch.lerp(m, g, 1.0 - beta1).sign_(), alpha=-lr)
        m.lerp_(g, 1.0 - beta2)


def _adamw(groups: list[dict], lr: float, betas: tuple[float, ...], eps: float) -> torch.optim.Optimizer:
    params = [p for g in groups for p in g["params"]]
    plain = _use_foreach(params)
    fused = plain and params[0].device.type in FUSED_ADAMW_DEVICES
    # fused: one pass over each tensor (p, grad, m, v) instead of ~7 elementwise kernels; on CPU torch's
    # foreach AdamW is a per-tensor loop of those kernels, measured 3-10x slower (docs/performance.md)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused or None,
                             foreach=(plain and not fused) or None)


def _lion(groups: list[dict], lr: float, betas: tuple[float, ...], eps: float) -> torch.optim.Optimizer:
    if len(betas) != 2:
        raise ValueError(f"optimizer.betas: lion takes two betas (beta1, beta2), got {list(betas)}")
    return Lion(groups, lr=lr, betas=(betas[0], betas[1]))


def _tiger(groups: list[dict], lr: float, betas: tuple[float, ...], eps: float) -> torch.optim.Optimizer:
    if len(betas) != 1:
        raise ValueError(f"optimizer.betas: tiger takes one beta, got {list(betas)}")
    return Tiger(groups, lr=lr, beta=betas[0])


# name -> builder(groups, lr, betas, eps); config.py validates `optimizer.name` against these keys.
OPTIMIZERS: dict[str, Callable[[list[dict], float, tuple[float, ...], float], torch.optim.Optimizer]] = {
    "adamw": _adamw,
    "lion": _lion,
    "tiger": _tiger,
}


def build_optimizer(
    model: nn.Module,
    name: str = "adamw",
    lr: float = 1e-3,
    betas: tuple[float, ...] | None = None,
    weight_decay: float = 0.1,
    eps: float = 1e-8,
    decay_embeddings: bool = False,
) -> torch.optim.Optimizer:
    """The named optimizer over `param_groups(model, ...)`; betas None means `DEFAULT_BETAS[name]`."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer.name: unknown optimizer {name!r}; choose one of {sorted(OPTIMIZERS)}")
    if lr < 0:
        raise ValueError(f"optimizer.lr must be >= 0, got {lr}")
    groups = param_groups(model, weight_decay, decay_embeddings)
    return OPTIMIZERS[name](groups, lr, tuple(betas) if betas is not None else DEFAULT_BETAS[name], eps)


def clip_gradients(parameters: Iterable[torch.Tensor], max_norm: float) -> float:
    """Scale all gradients together so their global L2 norm is at most `max_norm`; return the norm before.

    max_norm 0 turns clipping off but still measures the norm (for the logs). Under FSDP the norm is
    reduced over the shards, so every rank gets the same number.
    """
    norm = torch.nn.utils.clip_grad_norm_(list(parameters), max_norm if max_norm > 0 else math.inf)
    return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)
