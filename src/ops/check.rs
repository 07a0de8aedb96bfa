//! Comparing an f32 result with the f64 reference under a stated tolerance.

/// An element-wise bound `|y − ref| ≤ abs + rel·|ref|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Absolute part.
    pub abs: f64,
    /// Relative part.
    pub rel: f64,
}

impl Tolerance {
    /// DESIGN.md's default bound for N(0,1) inputs: 1e-6 + 1e-5·|ref|.
    pub const DEFAULT: Tolerance = Tolerance {
        abs: 1e-6,
        rel: 1e-5,
    };

    /// Whether `y` is within the bound of `reference`; non-finite references must be
    /// matched exactly (NaN by NaN, ±inf by the same infinity).
    pub fn accepts(&self, y: f32, reference: f64) -> bool {
        let y = y as f64;
        if reference.is_nan() {
            return y.is_nan();
        }
        if reference.is_infinite() {
            return y == reference;
        }
        (y - reference).abs() <= self.abs + self.rel * reference.abs()
    }
}

/// The outcome of comparing one output with its reference.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct CheckReport {
    /// Largest |y − ref| over elements where both are finite.
    pub max_abs_err: f64,
    /// Elements outside the tolerance.
    pub failures: usize,
    /// The first element outside the tolerance, if any.
    pub first_failure: Option<usize>,
    /// `true` when no element is outside the tolerance.
    pub ok: bool,
}

/// Compares `y` with `reference` element by element.
pub fn compare(y: &[f32], reference: &[f64], tol: Tolerance) -> CheckReport {
    assert_eq!(
        y.len(),
        reference.len(),
        "output and reference differ in length"
    );
    let mut max_abs_err = 0.0f64;
    let mut failures = 0;
    let mut first_failure = None;
    for (i, (&v, &r)) in y.iter().zip(reference).enumerate() {
        if v.is_finite() && r.is_finite() {
            max_abs_err = max_abs_err.max((v as f64 - r).abs());
        }
        if !tol.accepts(v, r) {
            failures += 1;
            first_failure.get_or_insert(i);
        }
    }
    CheckReport {
        max_abs_err,
        failures,
        first_failure,
        ok: failures == 0,
    }
}

/// A stable 64-bit FNV-1a hash of the output's bytes, as 16 hex digits.
pub fn output_hash(y: &[f32]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in y {
        for b in v.to_bits().to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}
