"""Turn the Gemma 3 270M GGUF into the Hugging Face folder vLLM 0.32 serves (run by the vLLM venv's Python).

    python vllm_convert.py MODEL.gguf OUT_DIR

vLLM 0.32 reads no GGUF ("not a valid JSON file"); transformers dequantizes it (bf16) and saves a folder.
Two fixes, both seen on this model (../shared/research/vllm-cpu.md): the converted tokenizer drops the
GGUF's ``add_bos_token = true`` (Gemma without ``<bos>`` writes garbage), and transformers' GGUF quantizer
object cannot be serialised (the weights are already dequantized: it is dropped). Writes OUT_DIR.tmp and
renames it, so a present OUT_DIR is a whole conversion.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def main(gguf: Path, out: Path) -> None:
    import torch
    from tokenizers import processors
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    bos = tok.bos_token or "<bos>"
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, tok.convert_tokens_to_ids(bos))])
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    ids = tok("The capital of France is")["input_ids"]
    if ids[0] != tok.convert_tokens_to_ids(bos):
        raise SystemExit(f"the tokenizer adds no {bos}: {ids[:4]}")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"converted {gguf} to {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
