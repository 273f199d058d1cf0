"""The sign optimizers Lion and Tiger, with the embedding remedies and Tiger's reference options.

- Lion: sign of an interpolated momentum (Chen et al., arXiv 2302.06675, Algorithm 2).
- Tiger: Lion with one beta, so the stored momentum is the signed one (Su Jianlin,
  https://kexue.fm/archives/9512; reference code github.com/bojone/tiger). As specified there: beta
  0.965 for language models (0.945 is the vision value); a per-parameter learning rate, lr x
  RMS(theta) for matrices, lr x RMS(row) for embedding tables, 0.5 lr and no decay for gains and
  biases (`rms_lr`); a NaN guard that keeps the momentum and shrinks the tensor towards 0 (gains
  towards 1) by `nan_shrink`; and gradient accumulation through the momentum (`accum_steps`: beta
  applied once per k micro-steps, each micro-gradient weighted (1 - beta) / k, the parameters moved
  on the k-th).

Embedding remedies (Su, "Lion/Tiger embedding outliers", https://kexue.fm/archives/9736): a row that
saw a gradient once keeps a non-zero momentum (in float32 with subnormals it never reaches 0), so
sign(m) keeps moving it by a full step, and with decay lambda it converges to -sign(m) / lambda. A
param group with `lazy=True` skips parameter, momentum and decay for rows whose gradient is exactly
zero (LazyAdam's rule); a group with `rule="adamw"` is stepped by AdamW instead (the Lion authors'
mixed optimizer), in the same optimizer object so that one state dict checkpoints and resumes
all of it.

Group keys (besides lr / weight_decay): `kind` (matrices | tables | gains | biases: what the RMS
rule and the NaN guard do), `lazy`, `rule` (sign | adamw), `lr_ratio` (the trainer sets lr =
schedule x lr_ratio), `adam_betas`, `eps`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from archlab.train.variants import DEFAULT_BETAS, NAN_SHRINK

# what a parameter is (train/optim.py param_groups)
GROUP_KINDS = ("matrices", "tables", "gains", "biases")
VECTOR_LR = 0.5  # Tiger's rate for gains and biases, relative to lr (bojone/tiger)
# the embedding's AdamW in a mixed optimizer: plain AdamW's defaults
ADAMW_BETAS = DEFAULT_BETAS["adamw"]


def _use_foreach(params: list[torch.Tensor]) -> bool:
    """Foreach kernels need plain tensors on one device; FSDP2's DTensors take
    the per-tensor loop."""
    devices = {p.device for p in params}
    return len(devices) <= 1 and all(type(p.data) is torch.Tensor for p in params)


class Lion(torch.optim.Optimizer):
    """Lion (arXiv 2302.06675, Algorithm 2) with decoupled weight decay; lazy rows and AdamW
    groups as above.

    c = beta1 * m + (1 - beta1) * g;  p <- p * (1 - lr * wd) - lr * sign(c);  m <- beta2 * m + (1 -
    beta2) * g
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
        *,
        rms_lr: bool = False,
        nan_shrink: float = 1.0,
        accum_steps: int = 1,
    ) -> None:
        if lr < 0:
            raise ValueError(f"{type(self).__name__}: lr must be >= 0, got {lr}")
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(
                f"{type(self).__name__}: betas must be two values in [0, 1), got {betas}"
            )
        if not 0.0 < nan_shrink <= 1.0:
            raise ValueError(
                f"{type(self).__name__}: nan_shrink must be in (0, 1] (1 = off), got {nan_shrink}"
            )
        if accum_steps < 1 or (accum_steps > 1 and betas[0] != betas[1]):
            raise ValueError(
                f"{type(self).__name__}: accum_steps must be >= 1, and > 1 only with one beta "
                f"(Tiger), got {accum_steps}"
            )
        defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "weight_decay": weight_decay,
            "kind": "auto",
            "lazy": False,
            "rule": "sign",
            "lr_ratio": 1.0,
            "adam_betas": ADAMW_BETAS,
            "eps": 1e-8,
            "rms_lr": rms_lr,
            "nan_shrink": nan_shrink,
        }
        super().__init__(params, defaults)
        self.accum_steps = accum_steps
        for group in self.param_groups:
            if group["kind"] not in ("auto", *GROUP_KINDS) or group["rule"] not in (
                "sign",
                "adamw",
            ):
                raise ValueError(
                    f"{type(self).__name__}: group kind {group['kind']!r} / rule "
                    f"{group['rule']!r}; kinds: auto, {', '.join(GROUP_KINDS)}; rules: sign, adamw"
                )
            if accum_steps > 1 and (group["lazy"] or group["rule"] != "sign"):
                raise ValueError(
                    f"{type(self).__name__}: accum_steps > 1 works on sign groups without lazy rows"
                )

    @property
    def guards_nan(self) -> bool:
        """Whether a step with non-finite gradients should still reach this optimizer
        (Tiger's NaN guard)."""
        return any(g["nan_shrink"] < 1.0 for g in self.param_groups)

    @torch.no_grad()
    def shrink(self) -> None:
        """The NaN guard on every tensor at once, for a step whose gradients are all unusable
        (a non-finite loss, or a global norm that clipping turned into NaN or zeros): momenta
        kept, weights shrunk."""
        for group in self.param_groups:
            for p in group["params"]:
                _shrink(group, p)

    def _state(self, p: torch.Tensor, adamw: bool) -> dict:
        state = self.state[p]
        if "exp_avg" not in state:
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if adamw:
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] = torch.zeros((), dtype=torch.float32)
        return state

    @torch.no_grad()
    # type: ignore[override]
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            if self.accum_steps > 1:
                self._accumulate(group, params)
            elif group["rule"] == "adamw":
                for p in params:
                    _apply(group, p, self._state(p, True), _adamw_update)
            elif _plain(group) and _use_foreach(params):
                _foreach_sign_step(
                    group, params, [self._state(p, False)["exp_avg"] for p in params]
                )
            else:
                for p in params:
                    _apply(group, p, self._state(p, False), _sign_update)
        return loss

    def _accumulate(self, group: dict, params: list[torch.Tensor]) -> None:
        """Accumulation through the momentum (bojone/tiger): m <- beta m at the first micro-step of
        k, then m += (1 - beta) / k * g every micro-step; the k-th moves the parameters by the
        signed step. The micro-step counter lives in the group, so the state dict carries it."""
        beta, k = group["betas"][0], self.accum_steps
        micro = group["micro"] = int(group.get("micro", 0))
        for p in params:
            m = self._state(p, False)["exp_avg"]
            if micro == 0:
                m.mul_(beta)
            m.add_(p.grad, alpha=(1.0 - beta) / k)
            if micro == k - 1:
                p.copy_(_move(group, p, m))
        group["micro"] = (micro + 1) % k


def _plain(group: dict) -> bool:
    return not (group["lazy"] or group["rms_lr"] or group["nan_shrink"] < 1.0)


def _kind(group: dict, p: torch.Tensor) -> str:
    """The group's kind; "auto" (parameters passed without one) reads matrices and biases
    off the shape."""
    return group["kind"] if group["kind"] != "auto" else ("matrices" if p.dim() >= 2 else "biases")


def _rate(group: dict, p: torch.Tensor) -> tuple[torch.Tensor | float, float]:
    """(lr, weight decay) for tensor p: flat, or Tiger's per-parameter rule with rms_lr."""
    lr, wd = group["lr"], group["weight_decay"]
    if not group["rms_lr"]:
        return lr, wd
    kind = _kind(group, p)
    if kind in ("gains", "biases"):
        return lr * VECTOR_LR, 0.0
    if kind == "tables":
        return lr * p.square().mean(dim=-1, keepdim=True).sqrt(), wd  # (rows, 1): one rate per row
    return lr * p.square().mean().sqrt(), wd


def _move(group: dict, p: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
    """p - lr_p * (sign(direction) + wd * p), lr_p the per-tensor (or per-row) rate."""
    lr, wd = _rate(group, p)
    return p - lr * (direction.sign() + wd * p)


def _sign_update(
    group: dict, p: torch.Tensor, g: torch.Tensor, state: dict
) -> dict[str, torch.Tensor]:
    """The new parameter and momentum of one Lion/Tiger step (not yet written)."""
    beta1, beta2 = group["betas"]
    m = state["exp_avg"]
    return {
        "param": _move(group, p, torch.lerp(m, g, 1.0 - beta1)),
        "exp_avg": torch.lerp(m, g, 1.0 - beta2),
    }


def _adamw_update(
    group: dict, p: torch.Tensor, g: torch.Tensor, state: dict
) -> dict[str, torch.Tensor]:
    """One AdamW step (arXiv 1711.05101, bias-corrected, decoupled decay) as
    torch.optim.AdamW computes it."""
    beta1, beta2 = group["adam_betas"]
    step = float(state["step"]) + 1
    m = torch.lerp(state["exp_avg"], g, 1.0 - beta1)
    v = state["exp_avg_sq"] * beta2 + (1.0 - beta2) * g * g
    denom = (v / (1.0 - beta2**step)).sqrt() + group["eps"]
    new = (
        p * (1.0 - group["lr"] * group["weight_decay"])
        - group["lr"] / (1.0 - beta1**step) * m / denom
    )
    return {
        "param": new,
        "exp_avg": m,
        "exp_avg_sq": v,
        "step": torch.tensor(step, dtype=torch.float32),
    }


def _apply(
    group: dict, p: torch.Tensor, state: dict, update: Callable[..., dict[str, torch.Tensor]]
) -> None:
    """Apply `update` to p and its state; NaN guard first, and with `lazy` only to rows
    with a gradient."""
    g = p.grad
    # keep m, shrink theta (bojone/tiger)
    if group["nan_shrink"] < 1.0 and not bool(g.isfinite().all()):
        _shrink(group, p)
        return
    new = update(group, p, g, state)
    if group["lazy"] and p.dim() >= 2:
        # (rows, 1...): rows with a gradient
        rows = g.ne(0).flatten(1).any(dim=1).view(-1, *([1] * (p.dim() - 1)))
        new = {
            k: v if v.dim() == 0 else torch.where(rows, v, p if k == "param" else state[k])
            for k, v in new.items()
        }
    p.copy_(new.pop("param"))
    for key, value in new.items():
        if key == "step":
            state[key] = value
        else:
            state[key].copy_(value)


def _shrink(group: dict, p: torch.Tensor) -> None:
    """theta <- s theta, gains 1 + s (theta - 1), s = the group's nan_shrink (1 = off)."""
    if group["nan_shrink"] < 1.0:
        target = 1.0 if _kind(group, p) == "gains" else 0.0
        p.sub_(target).mul_(group["nan_shrink"]).add_(target)


def _foreach_sign_step(
    group: dict, params: list[torch.Tensor], momenta: list[torch.Tensor]
) -> None:
    """The flat Lion/Tiger update over a whole group, in a few foreach kernels."""
    lr, wd = group["lr"], group["weight_decay"]
    beta1, beta2 = group["betas"]
    grads = [p.grad for p in params]
    if wd:
        torch._foreach_mul_(params, 1.0 - lr * wd)
    # lerp(m, g, 1 - b) = b * m + (1 - b) * g
    update = torch._foreach_lerp(momenta, grads, 1.0 - beta1)
    torch._foreach_sign_(update)
    torch._foreach_add_(params, update, alpha=-lr)
    torch._foreach_lerp_(momenta, grads, 1.0 - beta2)


class Tiger(Lion):
    """Tiger (kexue.fm/archives/9512): Lion with one beta, so the stored momentum is the signed one.

    m <- beta * m + (1 - beta) * g;  p <- p - lr_p * (sign(m) + wd * p), with lr_p = lr * RMS(p)
    (rows for tables; 0.5 lr and no decay for gains and biases) when rms_lr, else lr.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1e-4,
        beta: float = 0.965,
        weight_decay: float = 0.0,
        *,
        rms_lr: bool = True,
        nan_shrink: float = NAN_SHRINK,
        accum_steps: int = 1,
    ) -> None:
        super().__init__(
            params,
            lr=lr,
            betas=(beta, beta),
            weight_decay=weight_decay,
            rms_lr=rms_lr,
            nan_shrink=nan_shrink,
            accum_steps=accum_steps,
        )
