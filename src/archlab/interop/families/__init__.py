"""Every Hugging Face family archlab reads and writes, one table per module; export tries them in
this order. `READ_ONLY` families are read for their text model and never written (a multimodal
wrapper's other towers)."""

from archlab.interop.families.gemma import GEMMA
from archlab.interop.families.gemma2 import GEMMA2
from archlab.interop.families.gemma3 import GEMMA3, GEMMA3_TEXT
from archlab.interop.families.gpt2 import GPT2
from archlab.interop.families.gpt_neox import GPT_NEOX
from archlab.interop.families.gptj import GPTJ
from archlab.interop.families.llama import LLAMA
from archlab.interop.families.mistral import MISTRAL
from archlab.interop.families.olmo2 import OLMO2
from archlab.interop.families.phi import PHI
from archlab.interop.families.qwen2 import QWEN2
from archlab.interop.families.qwen3 import QWEN3
from archlab.interop.families.smollm3 import SMOLLM3
from archlab.interop.families.starcoder2 import STARCODER2
from archlab.interop.family import Family

FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in (
        LLAMA,
        MISTRAL,
        QWEN2,
        QWEN3,
        SMOLLM3,
        GEMMA,
        GEMMA2,
        GEMMA3_TEXT,
        OLMO2,
        GPT_NEOX,
        GPTJ,
        GPT2,
        PHI,
        STARCODER2,
    )
}
READ_ONLY: dict[str, Family] = {f.model_type: f for f in (GEMMA3,)}
