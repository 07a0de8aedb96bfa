//! The task grain of a launch: how many consecutive work-groups one task holds.

use crate::error::{Error, Result};
use std::fmt;
use std::num::NonZeroUsize;
use std::str::FromStr;

/// How a launch's work-groups are cut into tasks for the pool.
///
/// The numeric encoding is the seed's: `0` = [`Grain::Legacy`],
/// `4294967295` (`u32::MAX`) = [`Grain::Caller`], any other `k` =
/// [`Grain::Tasks`]`(k)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(into = "u32", from = "u32")]
pub enum Grain {
    /// One contiguous chunk of groups per granted worker (the caller included).
    Legacy,
    /// Tasks of `k` consecutive groups, claimed dynamically by whichever worker is free.
    Tasks(NonZeroUsize),
    /// The whole launch runs on the calling thread; the pool is not touched.
    Caller,
}

impl Grain {
    /// The seed's numeric code: 0 = legacy, `u32::MAX` = caller, `k` = tasks of `k` groups.
    pub fn from_u32(code: u32) -> Self {
        match code {
            0 => Grain::Legacy,
            u32::MAX => Grain::Caller,
            k => Grain::Tasks(NonZeroUsize::new(k as usize).expect("k is not 0")),
        }
    }

    /// The numeric code of this grain; `Tasks(k)` with `k ≥ u32::MAX` saturates
    /// at `u32::MAX − 1` (such a grain is one task per launch anyway).
    pub fn as_u32(self) -> u32 {
        match self {
            Grain::Legacy => 0,
            Grain::Caller => u32::MAX,
            Grain::Tasks(k) => k.get().min(u32::MAX as usize - 1) as u32,
        }
    }

    /// `Tasks(k)` for `k ≥ 1`, `None` for 0.
    pub fn tasks(k: usize) -> Option<Self> {
        NonZeroUsize::new(k).map(Grain::Tasks)
    }
}

impl From<u32> for Grain {
    fn from(code: u32) -> Self {
        Grain::from_u32(code)
    }
}

impl From<Grain> for u32 {
    fn from(g: Grain) -> u32 {
        g.as_u32()
    }
}

impl FromStr for Grain {
    type Err = Error;

    /// Accepts a number (`0`, `k`, `4294967295`) or `caller` (any case).
    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("caller") {
            return Ok(Grain::Caller);
        }
        t.parse::<u32>().map(Grain::from_u32).map_err(|_| {
            Error::BadArgument(format!(
                "grain {s:?}: expected 0 (legacy), a number of work-groups per task \
                 (1..4294967294), 4294967295 or `caller`"
            ))
        })
    }
}

impl fmt::Display for Grain {
    /// `0`, `k` or `caller`; the text parses back to the same grain.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Grain::Legacy => f.write_str("0"),
            Grain::Tasks(k) => write!(f, "{k}"),
            Grain::Caller => f.write_str("caller"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for code in [0, 1, 3, 64, u32::MAX - 1, u32::MAX] {
            assert_eq!(Grain::from_u32(code).as_u32(), code);
        }
        assert_eq!(Grain::from_u32(0), Grain::Legacy);
        assert_eq!(Grain::from_u32(u32::MAX), Grain::Caller);
        assert_eq!(Grain::from_u32(3), Grain::tasks(3).unwrap());
        assert_eq!(Grain::tasks(0), None);
    }

    #[test]
    fn parses_numbers_and_caller() {
        assert_eq!("0".parse::<Grain>().unwrap(), Grain::Legacy);
        assert_eq!(" 4 ".parse::<Grain>().unwrap(), Grain::tasks(4).unwrap());
        assert_eq!("caller".parse::<Grain>().unwrap(), Grain::Caller);
        assert_eq!("CALLER".parse::<Grain>().unwrap(), Grain::Caller);
        assert_eq!("4294967295".parse::<Grain>().unwrap(), Grain::Caller);
        for bad in ["", "-1", "x", "4294967296", "1.5"] {
            assert!(
                matches!(bad.parse::<Grain>(), Err(Error::BadArgument(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn display_parses_back() {
        for g in [Grain::Legacy, Grain::tasks(7).unwrap(), Grain::Caller] {
            assert_eq!(g.to_string().parse::<Grain>().unwrap(), g);
        }
        assert_eq!(Grain::Caller.to_string(), "caller");
        assert_eq!(serde_json::to_string(&Grain::Caller).unwrap(), "4294967295");
        assert_eq!(
            serde_json::from_str::<Grain>("2").unwrap(),
            Grain::tasks(2).unwrap()
        );
    }
}
