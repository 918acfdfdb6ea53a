#!/usr/bin/python3
"""Generates the golden fixture of tests/model/golden_test.cpp with PyTorch
(Debian's python3-torch): random weights of the `tiny` model (safetensors,
float32), a batch of tokens and targets, and the loss and per-parameter
gradient norms PyTorch computes for them in float64 from those float32
weights. The test reads only the committed files, never torch.

    /usr/bin/python3 tests/model/make_golden.py   # rewrites tests/model/golden/
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "peers"))
from cs336_model import SIZES, TransformerLM, loss_fn, save_safetensors  # noqa: E402

BATCH, CTX, SEED = 2, 16, 1234


def main():
    torch.manual_seed(SEED)
    vocab, d_model, d_ff, layers, heads = SIZES["tiny"]
    model = TransformerLM(vocab, d_model, d_ff, layers, heads, context_length=CTX)
    with torch.no_grad():  # norm gains away from 1, so their gradients are checked in general position
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
    out = os.path.join(HERE, "golden")
    os.makedirs(out, exist_ok=True)
    state = {k: v.float() for k, v in model.state_dict().items()}
    save_safetensors(os.path.join(out, "tiny.safetensors"), state, {"format": "pt", "model": "tiny"})

    tokens = torch.randint(0, vocab, (BATCH, CTX))
    targets = torch.randint(0, vocab, (BATCH, CTX))
    model = model.double()  # the float32 weights, upcast: an exact reference for them
    model.rebuild_tables()  # RoPE's tables from float64 in float64, not the float32 ones upcast
    loss = loss_fn(model, tokens, targets)
    loss.backward()
    norms = {name: p.grad.norm().item() for name, p in model.named_parameters()}
    golden = {
        "model": "tiny",
        "batch_size": BATCH,
        "context_length": CTX,
        "generated_by": "tests/model/make_golden.py, torch " + torch.__version__ + ", float64",
        "tokens": tokens.flatten().tolist(),
        "targets": targets.flatten().tolist(),
        "loss": loss.item(),
        "grad_norms": norms,
    }
    with open(os.path.join(out, "tiny.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"loss {loss.item():.6f}; wrote {out}/tiny.safetensors and tiny.json")


if __name__ == "__main__":
    main()
