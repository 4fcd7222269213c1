#!/usr/bin/env python3
"""The GPU's two ceilings as PyTorch reaches them (docs/device METHOD: measure them in the
session, on random data): a device-to-device copy, counting bytes read and written, and
8192-cube matrix products in bf16 and in fp32 (TF32 off, PyTorch's default for matmul).
Each is the mean of 10 (fp32: 3) back-to-back runs after one untimed, timed with CUDA events."""
import torch


def ms(f, n=10):
    f()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        f()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / n


p = torch.cuda.get_device_properties(0)
print(f"{torch.cuda.get_device_name()}: {p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB; torch {torch.__version__}")
x = torch.randn(2**28, device="cuda")  # 1 GiB, far beyond L2
y = torch.empty_like(x)
t = ms(lambda: y.copy_(x))
print(f"ceiling: copy {2 * x.numel() * 4 / (t / 1e3) / 1e12:.2f} TB/s (read + written)")
del x, y
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn_like(a)
t = ms(lambda: a @ b)
print(f"ceiling: bf16 product 8192^3 {2 * 8192**3 / (t / 1e3) / 1e12:.0f} TFLOP/s")
a, b = a.float(), b.float()
t = ms(lambda: a @ b, 3)
print(f"ceiling: fp32 product 8192^3 {2 * 8192**3 / (t / 1e3) / 1e12:.0f} TFLOP/s (TF32 {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'})")
