#!/usr/bin/env python3
"""The Python peers of `taskgrain bench peers`: jax[cpu], torch and numpy.

One persistent process per thread count speaks JSON lines on stdin/stdout (the
protocol is described in bench/peers/README.md and src/bench/peers/protocol.rs).
Inputs arrive as raw little-endian f32 files written by the driver; outputs go
back the same way. Every call is timed here, inside the process, with
time.perf_counter_ns around the call (and jax's block_until_ready), so neither
start-up nor the pipe is ever in a timing.

Usage: peers.py --threads N [--cpus 0,1] [--only jax,torch,numpy]

The driver starts one process per peer (--only NAME), so no library's idle
threads share a process with another's.
"""

import argparse
import json
import math
import os
import sys
import time
import traceback


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--cpus", default="", help="CPUs to run on (comma list); default: the first N allowed")
    p.add_argument("--only", default="", help="serve only these peers (comma list); default: all")
    return p.parse_args()


ARGS = parse_args()
N = ARGS.threads

# Pin before any library starts its threads: XLA sizes its CPU pool from the
# affinity mask, torch and OpenMP follow the explicit settings below.
try:
    allowed = sorted(os.sched_getaffinity(0))
    cpus = [int(c) for c in ARGS.cpus.split(",") if c.strip()] or allowed
    os.sched_setaffinity(0, cpus[:N])
except (AttributeError, OSError, ValueError):
    pass
os.environ["OMP_NUM_THREADS"] = str(N)
os.environ["MKL_NUM_THREADS"] = str(N)
# numpy is the 1-thread baseline: its BLAS (attention's matmuls) gets one thread.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
# XLA's CPU client sizes its thread pool from the affinity mask set above; one
# thread also turns Eigen's multithreading off.
if N == 1:
    xla = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = (xla + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402  (after the environment is set)

OUT = sys.stdout
# Libraries must not write to the protocol stream.
sys.stdout = sys.stderr

RMS_EPS = 1e-6
LN_EPS = 1e-5


def split_rows(dims):
    if len(dims) != 2:
        raise ValueError(f"row operator takes dims [R, C], got {dims}")
    return dims[0], dims[1]


def split_attn(dims):
    if len(dims) != 7:
        raise ValueError(f"attention takes dims [B, Hq, Hkv, Sq, Skv, Dk, Dv], got {dims}")
    return dims


def shapes_of(op, dims):
    """The input tensors' shapes, in the order of taskgrain's ops::input_names."""
    if op == "attention":
        b, hq, hkv, sq, skv, dk, dv = split_attn(dims)
        return [(b, hq, sq, dk), (b, hkv, skv, dk), (b, hkv, skv, dv)]
    r, c = split_rows(dims)
    return {
        "rmsnorm": [(r, c), (c,)],
        "layernorm": [(r, c), (c,), (c,)],
        "masked_softmax": [(r, c), (r, c)],
        "swiglu": [(r, c), (r, c)],
        "gelu_residual": [(r, c), (r, c)],
        "rope": [(r, c), (r, c // 2), (r, c // 2)],
    }[op]


def out_shape(op, dims):
    if op == "attention":
        b, hq, _, sq, _, _, dv = dims
        return (b, hq, sq, dv)
    return tuple(dims)


# ---------------------------------------------------------------- numpy


class NumpyPeer:
    name = "numpy"

    def __init__(self):
        self.version = np.__version__
        try:
            from scipy.special import erf

            self.erf = erf
            self.detail = "1 thread; erf from scipy.special"
        except ImportError:
            self.erf = np.vectorize(math.erf, otypes=[np.float32])
            self.detail = "1 thread; erf via math.erf (vectorize: slow)"

    def build(self, op, dims, xs):
        erf = self.erf
        if op == "rmsnorm":
            x, w = xs

            def f():
                ms = np.mean(x * x, axis=-1, keepdims=True)
                return x / np.sqrt(ms + np.float32(RMS_EPS)) * w

        elif op == "layernorm":
            x, w, b = xs

            def f():
                mu = np.mean(x, axis=-1, keepdims=True)
                d = x - mu
                var = np.mean(d * d, axis=-1, keepdims=True)
                return d / np.sqrt(var + np.float32(LN_EPS)) * w + b

        elif op == "masked_softmax":
            x, m = xs

            def f():
                z = x + m
                mx = np.max(z, axis=-1, keepdims=True)
                mx = np.where(np.isfinite(mx), mx, np.float32(0))
                e = np.exp(z - mx)
                s = np.sum(e, axis=-1, keepdims=True)
                return np.divide(e, s, out=np.zeros_like(e), where=s > 0)

        elif op == "swiglu":
            g, u = xs

            def f():
                return g / (np.float32(1) + np.exp(-g)) * u

        elif op == "gelu_residual":
            x, r = xs
            k = np.float32(1 / math.sqrt(2))

            def f():
                return np.float32(0.5) * x * (np.float32(1) + erf(x * k)) + r

        elif op == "rope":
            x, cos, sin = xs
            h = x.shape[1] // 2

            def f():
                a, b = x[:, :h], x[:, h:]
                return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=1)

        elif op == "attention":
            q, k, v = xs
            f = numpy_attention(q, k, v)
        elif op == "floor":
            a, b = xs

            def f():
                return a + b

        else:
            raise Unsupported(f"numpy: no {op}")
        return f, lambda y: y


def numpy_attention(q, k, v):
    b, hq, sq, dk = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    scale = np.float32(1 / math.sqrt(dk))
    q5 = q.reshape(b, hkv, g, sq, dk)

    def f():
        s = np.einsum("bhgqd,bhkd->bhgqk", q5, k, optimize=True) * scale
        s = s - s.max(axis=-1, keepdims=True)
        e = np.exp(s)
        p = e / e.sum(axis=-1, keepdims=True)
        o = np.einsum("bhgqk,bhkd->bhgqd", p, v, optimize=True)
        return o.reshape(b, hq, sq, v.shape[-1])

    return f


# ---------------------------------------------------------------- jax


class JaxPeer:
    name = "jax"

    def __init__(self):
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", False)
        self.jax, self.jnp = jax, jnp
        self.version = jax.__version__
        dev = jax.devices("cpu")[0]
        self.device = dev
        self.detail = (
            f"jit on {dev.platform}; affinity {sorted(os.sched_getaffinity(0))}; "
            f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '') or '(none)'}"
        )

    def build(self, op, dims, xs):
        jax, jnp = self.jax, self.jnp
        args = [jax.device_put(a, self.device) for a in xs]
        if op == "rmsnorm":

            def fn(x, w):
                ms = jnp.mean(x * x, axis=-1, keepdims=True)
                return x * jax.lax.rsqrt(ms + RMS_EPS) * w

        elif op == "layernorm":

            def fn(x, w, b):
                mu = jnp.mean(x, axis=-1, keepdims=True)
                d = x - mu
                var = jnp.mean(d * d, axis=-1, keepdims=True)
                return d * jax.lax.rsqrt(var + LN_EPS) * w + b

        elif op == "masked_softmax":

            def fn(x, m):
                return jax.nn.softmax(x + m, axis=-1)

        elif op == "swiglu":

            def fn(g, u):
                return jax.nn.silu(g) * u

        elif op == "gelu_residual":

            def fn(x, r):
                return jax.nn.gelu(x, approximate=False) + r

        elif op == "rope":
            h = dims[1] // 2

            def fn(x, cos, sin):
                a, b = x[:, :h], x[:, h:]
                return jnp.concatenate([a * cos - b * sin, b * cos + a * sin], axis=1)

        elif op == "attention":
            b, hq, hkv, sq, skv, dk, dv = dims
            g = hq // hkv
            scale = 1 / math.sqrt(dk)

            def fn(q, k, v):
                q5 = q.reshape(b, hkv, g, sq, dk)
                s = jnp.einsum("bhgqd,bhkd->bhgqk", q5, k) * scale
                p = jax.nn.softmax(s, axis=-1)
                o = jnp.einsum("bhgqk,bhkd->bhgqd", p, v)
                return o.reshape(b, hq, sq, dv)

        elif op == "floor":

            def fn(a, b):
                return a + b

        else:
            raise Unsupported(f"jax: no {op}")
        jf = jax.jit(fn)

        def f():
            return jf(*args).block_until_ready()

        return f, np.asarray


# ---------------------------------------------------------------- torch


class TorchPeer:
    name = "torch"

    def __init__(self):
        import torch

        torch.set_num_threads(N)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
        self.torch = torch
        self.version = torch.__version__
        self.detail = f"eager, inference_mode, {torch.get_num_threads()} threads"

    def build(self, op, dims, xs):
        torch = self.torch
        F = torch.nn.functional
        t = [torch.from_numpy(a) for a in xs]
        if op == "rmsnorm":
            x, w = t
            c = x.shape[-1]
            if hasattr(F, "rms_norm"):

                def fn():
                    return F.rms_norm(x, (c,), w, RMS_EPS)

            else:

                def fn():
                    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * w

        elif op == "layernorm":
            x, w, b = t
            c = x.shape[-1]

            def fn():
                return F.layer_norm(x, (c,), w, b, LN_EPS)

        elif op == "masked_softmax":
            x, m = t

            def fn():
                return torch.softmax(x + m, dim=-1)

        elif op == "swiglu":
            g, u = t

            def fn():
                return F.silu(g) * u

        elif op == "gelu_residual":
            x, r = t

            def fn():
                return F.gelu(x) + r

        elif op == "rope":
            x, cos, sin = t
            h = x.shape[1] // 2

            def fn():
                a, b = x[:, :h], x[:, h:]
                return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=1)

        elif op == "attention":
            q, k, v = t
            gqa = q.shape[1] != k.shape[1]

            def fn():
                if gqa:
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                return F.scaled_dot_product_attention(q, k, v)

        elif op == "floor":
            a, b = t

            def fn():
                return a + b

        else:
            raise Unsupported(f"torch: no {op}")

        def f():
            with torch.inference_mode():
                return fn()

        return f, lambda y: y.numpy()


# ---------------------------------------------------------------- protocol


class Unsupported(Exception):
    pass


PEERS = {}
UNAVAILABLE = {}
ONLY = [p.strip() for p in ARGS.only.split(",") if p.strip()]
for cls in (JaxPeer, TorchPeer, NumpyPeer):
    if ONLY and cls.name not in ONLY:
        continue
    try:
        PEERS[cls.name] = cls()
    except Exception as e:  # an uninstalled or broken library is a reason, not a crash
        UNAVAILABLE[cls.name] = f"{type(e).__name__}: {e}".splitlines()[0][:300]

LOADED = {}  # peer name -> (call, to_numpy, op, dims)


def read_inputs(op, dims, paths):
    shapes = shapes_of(op, dims)
    if len(paths) != len(shapes):
        raise ValueError(f"{op} takes {len(shapes)} inputs, got {len(paths)}")
    xs = []
    for path, shape in zip(paths, shapes):
        a = np.fromfile(path, dtype="<f4")
        if a.size != math.prod(shape):
            raise ValueError(f"{path}: {a.size} elements, expected {math.prod(shape)}")
        xs.append(np.ascontiguousarray(a.reshape(shape)))
    return xs


def time_calls(call, warmup, reps):
    y = None
    for _ in range(warmup):
        y = call()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        y = call()
        times.append((time.perf_counter_ns() - t0) / 1e3)
    return times, y


def handle(req):
    cmd = req.get("cmd")
    if cmd == "hello":
        peers = [
            {"name": n, "available": True, "version": p.version, "detail": p.detail}
            for n, p in PEERS.items()
        ]
        peers += [{"name": n, "available": False, "reason": r} for n, r in UNAVAILABLE.items()]
        return {"ok": True, "host": "python", "threads": N, "peers": peers}
    if cmd == "quit":
        return None
    name = req.get("peer")
    if name in UNAVAILABLE:
        return {"ok": False, "error": f"{name} unavailable: {UNAVAILABLE[name]}"}
    if name not in PEERS:
        return {"ok": False, "error": f"unknown peer {name!r}"}
    peer = PEERS[name]
    if cmd == "load":
        LOADED.pop(name, None)
        op, dims = req["op"], [int(d) for d in req["dims"]]
        xs = read_inputs(op, dims, req["inputs"])
        try:
            call, conv = peer.build(op, dims, xs)
        except Unsupported as e:
            return {"ok": False, "unsupported": True, "error": str(e)}
        LOADED[name] = (call, conv, op, dims)
        return {"ok": True}
    if cmd == "run":
        if name not in LOADED:
            return {"ok": False, "error": f"{name}: nothing loaded"}
        call, conv, op, dims = LOADED[name]
        times, y = time_calls(call, int(req.get("warmup", 0)), max(1, int(req.get("reps", 1))))
        resp = {"ok": True, "times_us": times}
        out = req.get("output")
        if out:
            a = np.ascontiguousarray(conv(y), dtype="<f4")
            a.tofile(out)
            resp["out_len"] = int(a.size)
        return resp
    if cmd == "floor":
        one = np.ones(1, dtype=np.float32)
        call, _ = peer.build("floor", [1, 1], [one, one])
        times, _ = time_calls(call, int(req.get("warmup", 10)), max(1, int(req.get("reps", 100))))
        return {"ok": True, "times_us": times}
    return {"ok": False, "error": f"unknown command {cmd!r}"}


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            resp = handle(json.loads(line))
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            resp = {"ok": False, "error": f"{type(e).__name__}: {e}".splitlines()[0][:500]}
        if resp is None:
            break
        OUT.write(json.dumps(resp) + "\n")
        OUT.flush()


if __name__ == "__main__":
    main()
