"""What identifies a loaded model for the cache key: the content digest of a local checkpoint and
the generic adapter's fingerprint (everything that can change its outputs)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

from finbench.models.generation import DECODE_ATTENTION_CUDA


def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def weights_digest(source: str, file_digest: Callable[[Path], str] | None = None) -> str:
    """A content fingerprint of a local checkpoint: the SHA-256 of every weight and config file,
    in full (a tensor changed anywhere must change the cache key). Hashing 15 GB takes ~10 s, so
    the runner passes `file_digest`, which remembers each file's digest by (path, size, mtime)."""
    folder = Path(source)
    if not folder.is_dir():
        return ""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*")):
        if path.suffix not in {".safetensors", ".bin", ".json"} or not path.is_file():
            continue
        digest.update(f"{path.name}:{(file_digest or file_sha256)(path)}".encode())
    return digest.hexdigest()[:16]


def fingerprint_of(adapter: Any, file_digest: Callable[[Path], str] | None = None) -> dict[str, Any]:
    """Everything about a loaded Hugging Face adapter that can change its outputs (the cache key's
    model part): checkpoint, weights digest, dtype, quantization, kernels, processor settings."""
    import transformers

    config = adapter.model.config
    return {
        "family": adapter.family,
        "source": adapter.source,
        "model_type": config.model_type,
        "revision": getattr(config, "_commit_hash", None) or "",
        "weights": weights_digest(str(adapter.checkpoint_folder()), file_digest),
        "dtype": str(adapter.dtype).removeprefix("torch."),
        "quant": adapter.quant,
        # what is really quantized (counts, types, bits); absent unquantized, so bf16 keys stay
        **({"quantization": adapter.quant_report} if adapter.quant_report else {}),
        "attn_implementation": adapter.attn_implementation,
        "device_type": adapter.device.type,
        "transformers": transformers.__version__,
        "processor": json.loads(json.dumps(adapter.processor_settings(), sort_keys=True, default=str)),
        # compiled kernels round differently in low precision; absent when nothing is compiled,
        # so eager runs keep their cache keys; the same for the fast paths whose kernels differ
        # from the reference path's (CUDA graphs replay the same kernels; vision indices are equal)
        **({"compiled": sorted({**adapter.compiled_blocks, **adapter.compiled_language_model})}
           if adapter.compiled_blocks or adapter.compiled_language_model else {}),
        **({"padded_widths": adapter.padded_widths} if adapter.padded_widths else {}),
        **({"fast_paths": kernels} if (kernels := [p for p in adapter.fast.on()
                                                   if p in ("causal_prefill", "static_decode")]) else {}),
        # decode steps and generate run without cuDNN's attention on CUDA (`decode_attention`)
        **({"decode_attention": DECODE_ATTENTION_CUDA} if adapter.device.type == "cuda" else {}),
    }
