//! The seed's three suites, row for row (../shared/seed/). One case list drives the
//! report, the tests and `run --check`.

use crate::error::{Error, Result};
use crate::ops::{Op, Shape};

/// A suite of the seed's report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Suite {
    /// The pilot rows.
    Pilot,
    /// The held-out validation rows.
    Validation,
    /// Fixed local = 8, block = 32; grains 0, 1, 3 and caller.
    FixedGrain,
}

impl Suite {
    /// The three suites in report order.
    pub const ALL: [Suite; 3] = [Suite::Pilot, Suite::Validation, Suite::FixedGrain];

    /// The suite's name.
    pub fn name(self) -> &'static str {
        match self {
            Suite::Pilot => "pilot",
            Suite::Validation => "validation",
            Suite::FixedGrain => "fixed-grain",
        }
    }

    /// The suite's rows, as in the seed.
    pub fn cases(self) -> Vec<(Op, Shape)> {
        let rows = |op, list: &[(usize, usize)]| -> Vec<(Op, Shape)> {
            list.iter().map(|&(r, c)| (op, Shape::rows(r, c))).collect()
        };
        match self {
            Suite::Pilot => [
                rows(Op::RmsNorm, &[(17, 65), (64, 256), (1024, 4096)]),
                rows(Op::GeluResidual, &[(64, 256)]),
                rows(Op::SwiGlu, &[(64, 256)]),
            ]
            .concat(),
            Suite::Validation => {
                let sizes = [(3, 1024), (129, 768), (257, 1538), (4096, 1024)];
                let mut v = Vec::new();
                for op in row_ops() {
                    v.extend(rows(op, &sizes));
                }
                for s in ["1x4x2x16x32x16x16", "1x4x1x64x128x32x32"] {
                    v.push((
                        Op::Attention,
                        Shape::parse(Op::Attention, s).expect("seed shapes are valid"),
                    ));
                }
                v
            }
            Suite::FixedGrain => row_ops()
                .flat_map(|op| rows(op, &[(17, 66), (129, 768), (1024, 4096)]))
                .collect(),
        }
    }
}

impl std::str::FromStr for Suite {
    type Err = Error;
    fn from_str(s: &str) -> Result<Suite> {
        Suite::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| {
                Error::BadArgument(format!(
                    "unknown suite {s:?} (known: pilot, validation, fixed-grain, all)"
                ))
            })
    }
}

/// The six row operators, in the seed's order.
fn row_ops() -> impl Iterator<Item = Op> {
    Op::ALL.into_iter().filter(|op| op.is_row_op())
}

/// Every distinct op/shape of the three suites, in first-seen order.
pub fn seed_cases() -> Vec<(Op, Shape)> {
    let mut v: Vec<(Op, Shape)> = Vec::new();
    for s in Suite::ALL {
        for c in s.cases() {
            if !v.contains(&c) {
                v.push(c);
            }
        }
    }
    v
}
