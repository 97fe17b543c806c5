//! The client-side rate limit of a role's API calls: client-go's token
//! bucket (`--kube-api-qps`, `--kube-api-burst`), pure. Each call reserves
//! a token and waits until it is due; no call is refused.

use crate::Tick;

/// client-go's defaults when a flag says 0: 5 calls a second, bursts of 10.
pub const DEFAULT_QPS: f64 = 5.0;
/// See [`DEFAULT_QPS`].
pub const DEFAULT_BURST: u32 = 10;

/// A token bucket that fills at `qps` tokens a second up to `burst`.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenBucket {
    /// Tokens a millisecond; `None`: no limit.
    rate: Option<f64>,
    burst: f64,
    /// Tokens at `at` (below zero: calls reserved ahead of time).
    tokens: f64,
    at: Tick,
}

impl TokenBucket {
    /// A full bucket. As client-go: a `qps` of 0 means [`DEFAULT_QPS`], a
    /// negative one no limit; a `burst` of 0 means [`DEFAULT_BURST`].
    pub fn new(qps: f64, burst: u32) -> TokenBucket {
        let qps = if qps == 0.0 { DEFAULT_QPS } else { qps };
        let burst = f64::from(if burst == 0 { DEFAULT_BURST } else { burst });
        TokenBucket {
            rate: (qps > 0.0 && qps.is_finite()).then_some(qps / 1000.0),
            burst,
            tokens: burst,
            at: 0,
        }
    }

    /// Reserves a token for a call at `now`; returns how many milliseconds
    /// the call waits before it goes (0: at once).
    pub fn reserve(&mut self, now: Tick) -> Tick {
        let Some(rate) = self.rate else {
            return 0;
        };
        if now > self.at {
            let filled = (now - self.at) as f64 * rate;
            self.tokens = (self.tokens + filled).min(self.burst);
            self.at = now;
        }
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            0
        } else {
            // The deficit fills at `rate`; counted from the bucket's time.
            let wait = (-self.tokens / rate).ceil() as Tick;
            (self.at + wait).saturating_sub(now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_goes_at_once_then_calls_are_spaced_at_the_rate() {
        let mut b = TokenBucket::new(5.0, 10);
        let waits: Vec<Tick> = (0..13).map(|_| b.reserve(1_000)).collect();
        assert_eq!(&waits[..10], &[0; 10], "the burst");
        assert_eq!(&waits[10..], &[200, 400, 600], "then one every 200 ms");
        // A second later five more tokens have come, three of them owed.
        assert_eq!(b.reserve(2_000), 0);
        assert_eq!(b.reserve(2_000), 0);
        assert_eq!(b.reserve(2_000), 200);
    }

    #[test]
    fn zero_means_the_default_and_negative_no_limit() {
        assert_eq!(TokenBucket::new(0.0, 0), TokenBucket::new(5.0, 10));
        let mut free = TokenBucket::new(-1.0, 1);
        assert!((0..1000).all(|_| free.reserve(0) == 0));
    }

    #[test]
    fn an_idle_bucket_fills_only_to_its_burst() {
        let mut b = TokenBucket::new(100.0, 3);
        for _ in 0..3 {
            b.reserve(0);
        }
        let waits: Vec<Tick> = (0..5).map(|_| b.reserve(3_600_000)).collect();
        assert_eq!(waits, vec![0, 0, 0, 10, 20]);
    }
}
