"""The RoPE methods an evaluation applies at inference (`archlab eval length`, `eval passkey`, the
lab's long-context measures): each (method, length)'s config, checked before any compute.

A method is a RoPE kind with an inference-time form; its scaling at target length L is `RopeKind.at`
(the kind's entry in nn/positions/scaling.py; L_train = the model's max_seq_len, s = max(1,
L / L_train)):
    none           the model as trained (past L_train this is plain extrapolation)
    linear, ntk    factor s (and ntk_mixed); ntk_by_parts, dynamic, yarn: factor s and
                   original_max_seq_len L_train; llama3: those and Llama 3.1's ramp (1, 4)
    rerope         window W (default: the model's own ReRoPE window if it has one, as hwfa2 does,
                   else L_train / 2)
    leaky_rerope   window W (default: the model's own Leaky ReRoPE window, else L_train / 4) and
                   slope 1/k by Su's rule (kexue.fm/archives/9708, `leaky_slope`): the largest
                   relative position any query sees, W + (L - 1 - W) / k, stays within half the
                   training length, k >= 16; `leaky_k="train"` maps the longest distance onto the
                   longest one trained; a number is k itself
(inv_leaky_rerope changes training only: in eval mode it is plain RoPE, which `none` measures.)
`logn=True` adds the log-n query scale at inference only ("log n" with a dagger in Su's tables) to a
model trained without it: ModelConfig.with_inference_logn, max(1, log n / log L_train) per query.
"""

from __future__ import annotations

from archlab.nn.config import ConfigError, ModelConfig
from archlab.nn.positions.scaling import ROPE_KINDS, RopeScaling, inference_kinds


def method_scaling(
    method: str,
    length: int,
    train_len: int,
    window: int | None = None,
    leaky_k: float | str = "half",
    own: RopeScaling | None = None,
) -> RopeScaling | None:
    """The `rope.scaling` method `method` (a kind of ROPE_KINDS) uses at `length` for a model
    trained at `train_len`: `RopeKind.at` (module doc). `own` is the model's own scaling: a kind it
    was built with lends its window when `window` is not given (an `hwfa2` model trained with
    `--model.rope.scaling.window 128` is evaluated at W = 128, as it decodes)."""
    if method not in inference_kinds():
        raise ValueError(
            f"scaling {method!r} is not allowed: one of {', '.join(inference_kinds())}"
        )
    if window is None and own is not None and own.kind == method and own.window is not None:
        window = own.window
    return ROPE_KINDS[method].at(length, train_len, window, leaky_k)


# without --lengths, those of these the model covers (CPU-sized)
DEFAULT_LENGTHS = (256, 512, 1024, 2048, 4096)


def default_lengths(
    config: ModelConfig,
    methods: list[str],
    window: int | None = None,
    allow_extrapolation: bool = False,
    leaky_k: float | str = "half",
    logn: bool = False,
) -> list[int]:
    """The lengths evaluated when none are given: DEFAULT_LENGTHS that every method covers (without
    `allow_extrapolation` plain RoPE stops at max_seq_len), else max_seq_len / 4, / 2 and itself. A
    refusal that is not about the length (a window that does not fit) is raised as it is."""
    n = config.max_seq_len
    # the user's settings first
    method_configs(config, methods, [n], window, allow_extrapolation, leaky_k, logn)

    def covered(length: int) -> bool:
        try:
            method_configs(config, methods, [length], window, allow_extrapolation, leaky_k, logn)
        except ValueError:
            return False
        return True

    fitting = [length for length in DEFAULT_LENGTHS if covered(length)]
    return fitting or sorted({max(2, n // 4), max(2, n // 2), n})


def trained_only(config: ModelConfig) -> bool:
    """Whether the model's own scaling holds in training mode only (inverse Leaky
    ReRoPE): `none`, the model as trained, keeps it, so its context limit (the distances
    training reached) applies."""
    s = own_scaling(config)
    return s is not None and ROPE_KINDS[s.kind].training_only


def own_scaling(config: ModelConfig) -> RopeScaling | None:
    """The RoPE scaling `config` was built with (None without one, or without RoPE)."""
    return config.rope.scaling if config.rope is not None else None


def applicable_methods(config: ModelConfig) -> list[str]:
    """The methods (`inference_kinds`, in their order) `config`'s weights can be evaluated under:
    `none` alone without RoPE; with a linear attention kernel the static schedules, since its state
    folds the keys in rotated once (Dynamic NTK and the ReRoPE family are refused by the config);
    every one otherwise."""
    if config.position != "rope":
        return ["none"]
    return [m for m in inference_kinds() if _refusal(config, m) is None]


def _refusal(config: ModelConfig, method: str) -> str | None:
    """Why `config` cannot take `method`'s scaling (the config's own one-line reason), or None
    when it can."""
    try:
        scaling = method_scaling(
            method, 2 * config.max_seq_len, config.max_seq_len, own=own_scaling(config)
        )
    except ValueError:
        # a default window that does not fit: method_configs names it with the caller's window
        return None
    if config.rope is None:  # no RoPE to scale: only `none` (method_configs refuses the others)
        return None if scaling is None else f"position={config.position!r} has no RoPE"
    try:
        config.replace(rope={"scaling": scaling if scaling is not None else own_scaling(config)})
    except ConfigError as err:
        return str(err).removeprefix("ModelConfig.")
    return None


def method_configs(
    config: ModelConfig,
    methods: list[str],
    lengths: list[int],
    window: int | None,
    allow_extrapolation: bool,
    leaky_k: float | str = "half",
    logn: bool = False,
) -> dict[tuple[str, int], ModelConfig]:
    """Each (method, length)'s config, all checked before any compute: a RoPE
    scaling needs a RoPE model, and a length past what the method covers needs
    `allow_extrapolation` (never with learned positions). `logn`: each with the log-n scale
    at inference (`ModelConfig.with_inference_logn`)."""
    config = config.with_inference_logn() if logn else config
    out = {}
    for method in methods:
        if method != "none" and config.position != "rope":
            raise ValueError(
                f"scaling {method!r} needs a RoPE model (this one has "
                f"position={config.position!r}); "
                "use --scalings none"
            )
        if method in inference_kinds() and (why := _refusal(config, method)) is not None:
            raise ValueError(
                f"scaling {method!r} is not allowed for this model: one of "
                f"{', '.join(applicable_methods(config))} ({why})"
            )
        for length in lengths:
            scaling = method_scaling(
                method, length, config.max_seq_len, window, leaky_k, own_scaling(config)
            )
            if scaling is None and trained_only(config):
                # inverse Leaky ReRoPE: eval mode is plain RoPE, to its own limit
                scaling = own_scaling(config)
            c = config.replace(rope={"scaling": scaling}) if config.rope is not None else config
            limit = c.context_limit
            if (
                limit is not None
                and length > limit
                and not (allow_extrapolation and c.position != "learned")
            ):
                how = (
                    "learned positions cannot extrapolate"
                    if c.position == "learned"
                    else "pass --allow-extrapolation (allow_extrapolation=True) to evaluate past it"
                )
                raise ValueError(
                    f"length {length} is past the {limit} tokens that scaling {method!r} covers "
                    f"for this model (trained at {config.max_seq_len}): {how}"
                )
            out[method, length] = c
    return out
