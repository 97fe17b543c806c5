//! Kubernetes resource quantities (`10Gi`, `500M`, `1.5Ti`, `100m`, `1e3`),
//! parsed, compared and printed as Kubernetes does.
//!
//! A quantity keeps the format it was written in (binary SI, decimal SI or
//! decimal exponent) and prints in canonical form in that format: the
//! largest suffix that keeps the number whole (`1536Mi` → `1536Mi`,
//! `1024Mi` → `1Gi`, `1.5Ti` → `1536Gi`). Values are exact to the nano unit.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How a quantity was written, and so how it prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// `BinarySi`.
    BinarySi,
    /// `DecimalSi`.
    DecimalSi,
    /// `DecimalExponent`.
    DecimalExponent,
}

/// A resource quantity. Equality and order compare values, not spelling.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    /// The value in nano units (10⁻⁹).
    nanos: i128,
    format: Format,
}

/// A malformed quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Hash)]
#[error("quantity {input:?} is malformed: {reason} (examples: 10Gi, 500M, 1.5Ti, 100m, 1e3)")]
pub struct QuantityError {
    /// `input`.
    pub input: String,
    /// `reason`.
    pub reason: &'static str,
}

const NANO: i128 = 1_000_000_000;
const BINARY: [(&str, u32); 6] = [
    ("Ki", 10),
    ("Mi", 20),
    ("Gi", 30),
    ("Ti", 40),
    ("Pi", 50),
    ("Ei", 60),
];
/// Decimal suffixes with their power of ten.
const DECIMAL: [(&str, i32); 10] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];

fn pow10(e: u32) -> Option<i128> {
    10i128.checked_pow(e)
}

impl Quantity {
    /// A whole number of bytes (or units), printed in binary SI.
    pub fn from_bytes(bytes: u64) -> Quantity {
        Quantity {
            nanos: bytes as i128 * NANO,
            format: Format::BinarySi,
        }
    }

    /// How it was written (binary, decimal, exponent), kept when formatted again.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The value rounded up to a whole unit (bytes for storage), clamped at 0.
    pub fn bytes(&self) -> u64 {
        let whole = self.nanos.div_euclid(NANO) + i128::from(self.nanos.rem_euclid(NANO) != 0);
        u64::try_from(whole.max(0)).unwrap_or(u64::MAX)
    }

    /// The value in milli units, rounded up (CPU style).
    pub fn millis(&self) -> i128 {
        let m = NANO / 1000;
        self.nanos.div_euclid(m) + i128::from(self.nanos.rem_euclid(m) != 0)
    }

    /// True for a zero quantity.
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// Parses a quantity as the Kubernetes API accepts it.
    pub fn parse(input: &str) -> Result<Quantity, QuantityError> {
        let err = |reason| QuantityError {
            input: input.to_string(),
            reason,
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("it is empty"));
        }
        let (negative, body) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let num_end = body
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(body.len());
        let (number, suffix) = body.split_at(num_end);
        if number.is_empty() || number == "." {
            return Err(err("it does not start with a number"));
        }
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        if frac.contains('.') {
            return Err(err("it has more than one decimal point"));
        }
        if frac.len() > 9 + 18 {
            return Err(err("it has too many decimal places"));
        }
        let digits: String = format!("{int}{frac}");
        let mantissa: i128 = digits.parse().map_err(|_| err("the number is too large"))?;
        let frac_digits = frac.len() as i32;

        // value = mantissa * 10^-frac_digits * factor
        let (format, pow2, pow10_exp) =
            if let Some((_, p)) = BINARY.iter().find(|(n, _)| *n == suffix) {
                (Format::BinarySi, *p, 0)
            } else if let Some((_, e)) = DECIMAL.iter().find(|(n, _)| *n == suffix) {
                (Format::DecimalSi, 0, *e)
            } else if let Some(exp) = suffix.strip_prefix(['e', 'E']) {
                let e: i32 = exp
                    .parse()
                    .map_err(|_| err("the exponent is not a whole number"))?;
                if !(-30..=30).contains(&e) {
                    return Err(err("the exponent is out of range"));
                }
                (Format::DecimalExponent, 0, e)
            } else {
                return Err(err(
                    "the suffix is not one of Ki Mi Gi Ti Pi Ei n u m k M G T P E or an exponent",
                ));
            };
        let scaled = mantissa
            .checked_mul(1i128 << pow2)
            .ok_or_else(|| err("the value is too large"))?;
        let shift = pow10_exp + 9 - frac_digits;
        let nanos = if shift >= 0 {
            scaled
                .checked_mul(pow10(shift as u32).ok_or_else(|| err("the value is too large"))?)
                .ok_or_else(|| err("the value is too large"))?
        } else {
            let d = pow10((-shift) as u32).ok_or_else(|| err("the value is too small"))?;
            // Kubernetes rounds up what cannot be represented.
            scaled / d + i128::from(scaled % d != 0)
        };
        Ok(Quantity {
            nanos: if negative { -nanos } else { nanos },
            format,
        })
    }

    fn canonical(&self) -> String {
        let sign = if self.nanos < 0 { "-" } else { "" };
        let n = self.nanos.abs();
        if n == 0 {
            return "0".into();
        }
        if self.format == Format::BinarySi && n % NANO == 0 {
            let whole = n / NANO;
            if let Some((name, p)) = BINARY.iter().rev().find(|(_, p)| whole % (1i128 << p) == 0) {
                return format!("{sign}{}{name}", whole >> p);
            }
            return format!("{sign}{whole}");
        }
        if self.format == Format::DecimalExponent {
            let mut e = 0i32;
            let mut v = n;
            // Express in units, then strip factors of 1000 (Kubernetes uses multiples of 3).
            if v % NANO == 0 {
                v /= NANO;
                while v % 1000 == 0 && v != 0 {
                    v /= 1000;
                    e += 3;
                }
                return if e == 0 {
                    format!("{sign}{v}")
                } else {
                    format!("{sign}{v}e{e}")
                };
            }
            e = -9;
            while v % 1000 == 0 {
                v /= 1000;
                e += 3;
            }
            return format!("{sign}{v}e{e}");
        }
        // Decimal SI (and binary values that are not whole units).
        let mut best = None;
        for (name, e) in DECIMAL.iter() {
            let unit = pow10((e + 9) as u32).unwrap_or(1);
            if n % unit == 0 {
                best = Some((n / unit, *name));
            }
        }
        let (v, name) = best.unwrap_or((n, "n"));
        format!("{sign}{v}{name}")
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical())
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Quantity, QuantityError> {
        Quantity::parse(s)
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Quantity) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Quantity) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Quantity) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl std::hash::Hash for Quantity {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.nanos.hash(state);
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.canonical())
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Quantity, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Kubernetes quantity such as 10Gi")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantity, E> {
                Quantity::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Quantity, E> {
                Quantity::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Quantity, E> {
                Quantity::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Quantity, E> {
                Quantity::parse(&v.to_string()).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn parses_and_prints_like_kubernetes() {
        for (input, printed) in [
            ("10Gi", "10Gi"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("1.5Ti", "1536Gi"),
            ("500M", "500M"),
            ("1000M", "1G"),
            ("100m", "100m"),
            ("0.1", "100m"),
            ("1e3", "1e3"),
            ("1E6", "1e6"),
            ("12e2", "1200"),
            ("0", "0"),
            ("-5Gi", "-5Gi"),
            ("1", "1"),
            ("0.5Ki", "512"),
            ("1.5", "1500m"),
        ] {
            assert_eq!(q(input).to_string(), printed, "{input}");
        }
    }

    #[test]
    fn compares_by_value_across_formats() {
        assert_eq!(q("1Gi"), q("1024Mi"));
        assert!(q("1G") < q("1Gi"));
        assert!(q("100m") < q("1"));
        assert_eq!(q("1e3"), q("1k"));
        assert_eq!(q("1.5Ti").bytes(), 1_649_267_441_664);
        assert_eq!(q("100m").bytes(), 1, "bytes round up");
        assert_eq!(q("100m").millis(), 100);
    }

    #[test]
    fn malformed_quantities_are_clear_errors() {
        for bad in [
            "",
            "Gi",
            "1.2.3",
            "10GB",
            "1e",
            "1exx",
            "--1",
            "1e99",
            "99999999999999999999999999999999999999999Ei",
        ] {
            let e = Quantity::parse(bad).unwrap_err();
            assert!(e.to_string().contains("malformed"), "{bad}: {e}");
        }
    }

    #[test]
    fn serde_round_trips_strings_and_numbers() {
        let v: Quantity = serde_json::from_str("\"2Gi\"").unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), "\"2Gi\"");
        let n: Quantity = serde_json::from_str("5").unwrap();
        assert_eq!(n, q("5"));
    }
}
