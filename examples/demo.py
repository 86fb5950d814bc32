"""Hurray end to end: a small model's weights, one matrix quantised to per-channel int4,
saved with metadata, inspected and verified by the `hurray` CLI, opened lazily and handed,
without copying, to PyTorch (DLPack) and to a consumer of the native protocol.

Run by scripts/demo.sh after `pip install .`; needs NumPy, uses PyTorch when installed.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

import hurray

try:
    import torch
except ImportError:  # the demo runs without it, skipping the PyTorch steps
    torch = None

START = time.perf_counter()


def step(title):
    print(f"\n== {title}")


def nbytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


# ============================================================================================
# 1. A small model
# ============================================================================================

VOCAB, DIM, HIDDEN = 1024, 256, 1024
rng = np.random.default_rng(2026)
weights = {
    "embed": rng.standard_normal((VOCAB, DIM), dtype=np.float32) * 0.02,
    "mlp.up.weight": rng.standard_normal((HIDDEN, DIM), dtype=np.float32) / DIM**0.5,
    "mlp.up.bias": np.zeros(HIDDEN, dtype=np.float32),
    "mlp.down.weight": rng.standard_normal((DIM, HIDDEN), dtype=np.float32) / HIDDEN**0.5,
}
weights["lm_head"] = weights["embed"].T  # a transposed view: saved with its strides, as it is
if torch is not None:
    torch.manual_seed(0)
    weights["norm.weight"] = torch.ones(DIM, dtype=torch.bfloat16)
    weights["rope.inv_freq"] = 1.0 / (10000 ** (torch.arange(0, DIM // 8, 2) / (DIM // 8)))

step("model")
for name, w in weights.items():
    kind = "torch" if torch is not None and isinstance(w, torch.Tensor) else "numpy"
    print(f"  {name:16} {kind:5} {str(w.dtype):15} {tuple(w.shape)}")


# ============================================================================================
# 2. Quantise one matrix to per-channel int4 with float32 scales (hurray.quantize)
# ============================================================================================


def dequantise(t):
    """A consumer of the native protocol: anything with __hurray__ in, float32 NumPy out."""
    t = hurray.from_hurray(t)  # one HurrayTensorContext: descriptor and every buffer, no copy
    assert t.layout == "per_channel" and t.dtype == hurray.dtype.int4 and t.axis == 0
    return np.asarray(hurray.dequantize(t))  # (values - 0) * scales in hurray-core, no GIL


step("quantise mlp.up.weight to per-channel int4")
original = weights["mlp.up.weight"]
# Symmetric per-row int4 (hurray-core's kernel): scale = max|row| / 7, q = round(w / scale),
# ties to even, in [-7, 7]; packed values (two per byte) and one float32 scale per row.
quantised = hurray.quantize(original, hurray.dtype.int4, layout="per_channel", axis=0)
weights["mlp.up.weight"] = quantised
print(f"  {quantised.layout}, {quantised.dtype.name}, shape {quantised.shape}, axis {quantised.axis}")
for buffer in quantised.buffers:
    print(f"  buffer {buffer['role']:7} {nbytes(buffer['byte_size']):>9}")
print(f"  {nbytes(original.nbytes)} float32 -> "
      f"{nbytes(sum(b['byte_size'] for b in quantised.buffers))} int4 + scales")


# ============================================================================================
# 3. Save, with metadata
# ============================================================================================

workdir = Path(tempfile.mkdtemp(prefix="hurray-demo-"))
path = workdir / "tiny.hurray"
metadata = {
    "model": "tiny-mlp", "framework": "numpy" + ("+torch" if torch is not None else ""),
    "config": {"vocab": VOCAB, "dim": DIM, "hidden": HIDDEN, "tied_embeddings": True},
    "lr": 3e-4, "steps": 1000, "tags": ["demo", "int4"],
}
tensor_metadata = {"mlp.up.weight": {"quantisation": {"bits": 4, "scheme": "symmetric",
                                                      "granularity": "per_channel"}}}

step(f"hurray.save -> {path}")
t0 = time.perf_counter()
hurray.save(path, weights, metadata, tensor_metadata=tensor_metadata)
print(f"  {len(weights)} tensors, {nbytes(path.stat().st_size)} in "
      f"{(time.perf_counter() - t0) * 1e3:.1f} ms (temporary + fsync + rename)")


# ============================================================================================
# 4. The installed CLI
# ============================================================================================


def find_cli():
    scripts = Path(sysconfig.get_path("scripts"))
    for candidate in (scripts / "hurray", Path(sys.prefix) / "bin" / "hurray",
                      Path(__file__).resolve().parents[1] / "build" / "hurray"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("hurray")


cli = find_cli()
for command in ("info", "verify"):
    step(f"hurray {command}")
    if cli is None:
        print("  (the hurray CLI is not installed; skipped)")
        continue
    run = subprocess.run([cli, command, str(path)], capture_output=True, text=True)
    for line in (run.stdout + run.stderr).splitlines():
        print("  " + line.replace(str(workdir) + "/", ""))
    if run.returncode != 0:
        sys.exit(f"hurray {command} failed with status {run.returncode}")


# ============================================================================================
# 5. Open lazily; zero-copy to PyTorch and to the native consumer
# ============================================================================================

step("hurray.open (lazy: the index only)")
with hurray.open(path) as f:
    print(f"  {len(f)} tensors: {', '.join(f.keys())}")
    print(f"  metadata['config'] = {f.metadata['config']}")
    print(f"  tensor_metadata('mlp.up.weight') = {f.tensor_metadata('mlp.up.weight')}")
    embed = f["embed"]  # O(1) lookup; the mapping, not a copy
    head = f["lm_head"]
    q = f["mlp.up.weight"]
    f.verify("mlp.up.weight")  # this tensor's checksums, on demand
    rows = f.slice("embed", 10, 14)  # only those rows are mapped
    norm = f["norm.weight"] if "norm.weight" in f else None
print(f"  closed; tensors stay valid: embed {embed.shape} readonly={embed.readonly}, "
      f"buffer address % 64 = {embed.buffers[0]['address'] % 64}")

step("dense -> PyTorch via DLPack")
if torch is not None:
    te = torch.from_dlpack(embed)
    assert te.data_ptr() == embed.buffer_address + embed.byte_offset  # the same memory
    assert torch.equal(te, torch.from_numpy(weights["embed"]))
    th = torch.from_dlpack(head)  # the transposed view kept its strides
    assert th.stride() == (1, DIM) and torch.equal(th, te.T)
    assert torch.equal(torch.from_dlpack(rows), te[10:14])
    assert torch.equal(torch.from_dlpack(norm), weights["norm.weight"])
    print(f"  torch.from_dlpack(embed): {te.dtype} {tuple(te.shape)}, same address, equal: True")
    print(f"  lm_head (saved as the view embed.T): strides {th.stride()}, equal to embed.T: True")
    print(f"  f.slice('embed', 10, 14) equals embed[10:14]: True; norm.weight {norm.dtype.name}")
else:
    te = np.from_dlpack(embed)
    assert np.array_equal(te, weights["embed"])
    print("  (PyTorch not installed) np.from_dlpack(embed) equal: True")

step("quantised -> native protocol consumer -> hurray.dequantize")
dq = dequantise(q)
error = np.abs(dq - original)
bound = float(np.abs(original).max(axis=1).max() / 7.0 / 2)
print(f"  max |dequantised - original| = {error.max():.5f}  (bound: max scale / 2 = {bound:.5f})")
print(f"  mean |error| = {error.mean():.5f}; relative Frobenius error = "
      f"{np.linalg.norm(dq - original) / np.linalg.norm(original):.4f}")
assert error.max() <= bound + 1e-6
x = rng.standard_normal((4, DIM), dtype=np.float32)
y, y_q = x @ original.T, x @ dq.T
print(f"  x @ W.T: max |int4 - float32| = {np.abs(y - y_q).max():.4f} "
      f"(|y| up to {np.abs(y).max():.2f})")

shutil.rmtree(workdir)
print(f"\ndone in {time.perf_counter() - START:.2f} s (after imports)")
