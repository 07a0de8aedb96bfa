#!/usr/bin/env python3
"""Fits the polynomial coefficients used by src/packet/math.rs.

Not part of the build: run it by hand (needs numpy and mpmath) and paste the
printed f32 coefficients into math.rs. The accuracy claims in math.rs are
checked by the Rust tests against an f64 reference, not by this script.

Method: weighted least squares in 60-digit arithmetic (mpmath), iterated with
Lawson's reweighting toward the minimax (equi-oscillating) error, then the
coefficients are rounded to f32 one at a time from the lowest order up, refitting
the still-free higher ones after each rounding (so the rounding of c_k is absorbed
by c_{k+1..}).

The coefficients in math.rs came from (each takes a minute or two):
    python3 tools/fit_math.py exp               # EXP_C: the degree-6 fit
    python3 tools/fit_math.py erfs 1.5 8        # ERF_P: degree 8 in x^2 on |x| <= 1.5,
                                                #   c0 = 2/sqrt(pi) exact (split hi/lo in Rust)
    python3 tools/fit_math.py erfl 1.5 4 abs 7 8  # ERFC_S: degree 7 in (u - 2.75)
    python3 tools/fit_math.py gelu 2.5 8        # GELU_H: degree 8 in x^2 on |x| < 2.5,
                                                #   relative error of Phi(x) = 1/2 + x h(x^2)
"""
import sys
import numpy as np
import mpmath as mp

mp.mp.dps = 60


def f32(v):
    return float(np.float32(float(v)))


def fit(func, lo, hi, deg, var=lambda x: x, weight=lambda x, y: 1 / abs(y),
        fixed=(), npts=400, iters=40):
    """Minimax-ish fit of func(x) ~ sum c_k var(x)^k, k=0..deg, with c_k for
    k < len(fixed) fixed. Error measured as |approx - func| * weight."""
    xs = [mp.mpf(lo) + (mp.mpf(hi) - mp.mpf(lo)) * (1 - mp.cos(mp.pi * (i + 0.5) / npts)) / 2
          for i in range(npts)]
    ys = [func(x) for x in xs]
    ts = [var(x) for x in xs]
    ws = [weight(x, y) for x, y in zip(xs, ys)]
    coeffs = [mp.mpf(c) for c in fixed]

    def solve(coeffs):
        k0 = len(coeffs)
        lw = [mp.mpf(1)] * npts
        best = None
        for _ in range(iters):
            rows, rhs = [], []
            for t, y, w, l in zip(ts, ys, ws, lw):
                s = mp.sqrt(l) * w
                base = sum(c * t ** k for k, c in enumerate(coeffs))
                rows.append([s * t ** k for k in range(k0, deg + 1)])
                rhs.append(s * (y - base))
            A = mp.matrix(rows)
            b = mp.matrix(rhs)
            sol = mp.lu_solve(A.T * A, A.T * b)
            c = coeffs + [sol[i] for i in range(deg + 1 - k0)]
            errs = [abs(sum(ck * t ** k for k, ck in enumerate(c)) - y) * w
                    for t, y, w in zip(ts, ys, ws)]
            m = max(errs)
            if best is None or m < best[0]:
                best = (m, c)
            tot = sum(l * e for l, e in zip(lw, errs))
            lw = [l * e / tot for l, e in zip(lw, errs)]
        return best

    # round one coefficient at a time, refitting the rest
    while len(coeffs) < deg + 1:
        m, c = solve(coeffs)
        coeffs.append(mp.mpf(f32(c[len(coeffs)])))
    errs = [abs(sum(ck * t ** k for k, ck in enumerate(coeffs)) - y) * w
            for t, y, w in zip(ts, ys, ws)]
    return [float(c) for c in coeffs], float(max(errs)), float(m)


def show(name, res):
    c, e, e_unrounded = res
    print(f"// {name}: max weighted error {e:.3e} (before f32 rounding {e_unrounded:.3e})")
    for k, v in enumerate(c):
        print(f"    c{k} = {v!r:>24} = {np.float32(v).view(np.uint32):#010x}")
        if float(np.float32(v)) != v:
            lo = v - float(np.float32(v))
            print(f"       (hi {float(np.float32(v))!r}, lo {float(np.float32(lo))!r})")


def erfcx(x):
    return mp.erfc(x) * mp.exp(x * x)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    if what in ("exp", "all"):
        # e^r on [-ln2/2, ln2/2], relative error, c0 = c1 = 1 fixed
        h = float(mp.log(2) / 2) * 1.0001
        for deg in (5, 6):
            show(f"exp deg {deg}", fit(mp.exp, -h, h, deg, fixed=(1, 1)))
    if what.startswith("erfs") or what == "all":
        T = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
        # erf(x)/x = P(x^2) on [0, T], relative error
        for deg in range(int(sys.argv[3]) if len(sys.argv) > 3 else 5, 9):
            show(f"erf small T={T} deg {deg}",
                 fit(lambda x: mp.erf(x) / x if x != 0 else 2 / mp.sqrt(mp.pi), 0, T, deg,
                     var=lambda x: x * x, fixed=(2 / mp.sqrt(mp.pi),)))
    if what == "gelu":
        # gelu(x) = x Phi(x), Phi(x) = 1/2 + x h(x^2), h(s) = erf(sqrt(s/2)) / (2 sqrt(s)):
        # h fitted in s = x^2 for the relative error of Phi on the negative side (the
        # worse one): weight x / Phi(-x)
        X, deg = float(sys.argv[2]), int(sys.argv[3])
        phi = lambda x: (1 + mp.erf(x / mp.sqrt(2))) / 2
        h = lambda x: mp.erf(x / mp.sqrt(2)) / (2 * x) if x != 0 else 1 / mp.sqrt(2 * mp.pi)
        show(f"gelu h on |x| < {X} deg {deg} in x^2",
             fit(h, 0, X, deg, var=lambda x: x * x,
                 weight=lambda x, y: (x + mp.mpf("1e-3")) / phi(-x), npts=200, iters=25))
    if what.startswith("erfl"):
        T, U = float(sys.argv[2]), float(sys.argv[3])
        mode = sys.argv[4]
        c = (T + U) / 2
        for deg in range(int(sys.argv[5]), int(sys.argv[6])):
            if mode == "erf":   # error weighted by erfc: absolute error in erf
                w = lambda x, y: mp.erfc(x)
            else:              # plain absolute error in S = relative error in erfc
                w = lambda x, y: 1
            show(f"log erfcx on [{T},{U}] ({mode}) deg {deg} in (u - {c})",
                 fit(lambda x: mp.log(erfcx(x)), T, U, deg, var=lambda x: x - c, weight=w,
                     npts=200, iters=25))
