"""A tiny BERT built from a `BertConfig` and exported to ONNX on the spot: nothing is downloaded.

`tiny_bert_onnx(root)` writes `root/onnx_model/` holding `model.onnx`,
`config.json` and a WordPiece tokenizer, and returns that folder. Used by the
optimum and fastembed tests.
"""

from __future__ import annotations

from pathlib import Path

WORDS = ["hello", "world", "the", "cat", "dog", "sat", "on", "mat", "gpu", "cpu", "onnx"]
HIDDEN = 32


def tiny_bert_onnx(root: Path) -> Path:
    """Export a one-layer, 32-wide BERT with random weights (seed 0) and its tokenizer."""
    import torch
    from optimum.onnxruntime import ORTModelForFeatureExtraction
    from transformers import BertConfig, BertModel, BertTokenizerFast

    torch.manual_seed(0)
    source, out = root / "torch_model", root / "onnx_model"
    source.mkdir(parents=True, exist_ok=True)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = [
        *("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
        *WORDS,
        *(f"##{c}" for c in letters),
        *letters,
    ]
    (source / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(
        vocab_file=str(source / "vocab.txt"), do_lower_case=True, model_max_length=64
    )
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=HIDDEN,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=64,
    )
    BertModel(config).eval().save_pretrained(source)
    tokenizer.save_pretrained(source)
    model = ORTModelForFeatureExtraction.from_pretrained(source, export=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
