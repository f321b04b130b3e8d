#!/usr/bin/python3
"""bagualu from Python through ctypes: a bad config is an error message (the process
goes on), then the tiny MoE model trains on a synthetic copy task and samples.

Usage: train_and_generate.py [path/to/libbagualu.so] [configs/tiny_moe.json]
"""
import ctypes
import math
import sys

lib = ctypes.CDLL(sys.argv[1] if len(sys.argv) > 1 else "libbagualu.so.0")
config = sys.argv[2] if len(sys.argv) > 2 else "configs/tiny_moe.json"
lib.bagualu_version.restype = ctypes.c_char_p
lib.bagualu_open_config.restype = ctypes.c_void_p
lib.bagualu_open_config.argtypes = [ctypes.c_char_p]
lib.bagualu_open_error.restype = ctypes.c_char_p
lib.bagualu_last_error.restype = ctypes.c_char_p
lib.bagualu_last_error.argtypes = [ctypes.c_void_p]
lib.bagualu_set_option.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
lib.bagualu_train.argtypes = [ctypes.c_void_p, ctypes.c_long]
lib.bagualu_metric.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_double)]
lib.bagualu_evaluate.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                 ctypes.POINTER(ctypes.c_double)]
lib.bagualu_generate.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int,
                                 ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)]
lib.bagualu_close.argtypes = [ctypes.c_void_p]


def check(h, status, what):
    if status != 0:
        sys.exit(f"{what}: status {status}: {lib.bagualu_last_error(h).decode()}")


def metric(h, name):
    v = ctypes.c_double()
    check(h, lib.bagualu_metric(h, name.encode(), ctypes.byref(v)), name)
    return v.value


print("bagualu", lib.bagualu_version().decode())
# A config with an unknown key: no handle, a message naming the key, and we carry on.
bad = lib.bagualu_open_config(b'{"vocab_size": 64, "hidden_sise": 64}')
message = lib.bagualu_open_error().decode()
assert bad is None, "a bad config opened"
assert "hidden_sise" in message, f"the error does not name the bad key: {message!r}"
print("bad config refused:", message)

h = lib.bagualu_open_config(config.encode())
assert h, lib.bagualu_open_error().decode()
status = lib.bagualu_set_option(h, b"batch-size", b"eight")
assert status == 2 and b"batch-size" in lib.bagualu_last_error(h), "a bad option was accepted"
for name, value in [("synthetic", "copy"), ("steps", "30"), ("batch-size", "8"),
                    ("seq-len", "32"), ("lr", "3e-3"), ("threads", "2")]:
    check(h, lib.bagualu_set_option(h, name.encode(), value.encode()), name)
check(h, lib.bagualu_train(h, 10), "train")
first = metric(h, "loss")
check(h, lib.bagualu_train(h, 20), "train")
print(f"step {metric(h, 'step'):.0f}: loss {metric(h, 'loss'):.4f} (step 10: {first:.4f}), "
      f"{metric(h, 'tokens_per_s'):.0f} tokens/s, grad norm {metric(h, 'grad_norm'):.3f}")
assert metric(h, "step") == 30 and math.isfinite(metric(h, "loss"))
loss = ctypes.c_double()
check(h, lib.bagualu_evaluate(h, None, 4, ctypes.byref(loss)), "evaluate")
print(f"evaluation loss {loss.value:.4f}")
prompt = (ctypes.c_int * 8)(5, 9, 14, 2, 5, 9, 14, 2)
out, n = (ctypes.c_int * 16)(), ctypes.c_int()
check(h, lib.bagualu_generate(h, prompt, 8, 16, out, ctypes.byref(n)), "generate")
print("generated:", list(out[:n.value]))
assert n.value == 16
lib.bagualu_close(h)
